/* internal.h — the private C view of every layer at once, for the layers above autograd
 * (optim, data, io, ssl, loop, dist, the CUDA backend) and for ops and autograd, which
 * call each other by design. The files of core/ include core/core.h only. */
#ifndef CR_INTERNAL_H
#define CR_INTERNAL_H

#include "core.h"
#include "call.h"
#include "node.h"

#endif
