/* console.c — whether a live progress line is up on stdout (see crescent_io.h), so that
 * messages from C (the loop's signal lines) and from Lua start on a line of their own. */
#include <stdio.h>

#include "crescent.h"

static int live_line_up;

void cr_console_set_live_line(int up) { live_line_up = up != 0; }

int cr_console_live_line_up(void) { return live_line_up; }

void cr_console_end_live_line(void) {
    if (!live_line_up) return;
    live_line_up = 0;
    fputc('\n', stdout);
    fflush(stdout);
}
