-- crescent.dist — distributed training (issue 7): the launcher's environment so far;
-- collectives, DDP, SyncBN and the distributed sampler build on it.
--   cr.dist.launcher.detect() -> {launcher, rank, world_size, local_rank, local_world_size, ...}
return {
  launcher = require 'crescent.dist.launcher',
}
