-- crescent.recipe — recipe assembly, the top floor of the training code: what a recipe
-- file calls to build and run its task.
--   cr.recipe.run (recipe/run.lua): the run folder run.dir/<run.name>, the device, threads
--     and seed, log.txt, the log and checkpoint hooks, results.json, model.init
--   cr.recipe.ssl (recipe/ssl.lua): the self-supervised recipes' config, multi-crop views,
--     trunk, task(name, cfg) around a method, banner and final figures; the frozen-trunk
--     recipes' (linear_eval.lua, extract.lua) config and trunk
local M = {}
M.run = require 'crescent.recipe.run'
M.ssl = require 'crescent.recipe.ssl'
return M
