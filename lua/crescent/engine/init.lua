-- crescent.engine — the training engine: Task (what a run holds), train (the pre-flight
-- check and the C step loop), the standard train/eval steps, meters and the event storage.
local M = {}
M.Task = require 'crescent.engine.task'
M.Storage = require 'crescent.engine.storage'
M.meters = require 'crescent.engine.meters'
M.steps = require 'crescent.engine.steps'
M.loop = require 'crescent.engine.loop'
M.checkpoint = require 'crescent.engine.checkpoint'
local trainer = require 'crescent.engine.trainer'
M.train = trainer.train
M.check = trainer.check
M.AccuracyMeter = M.meters.AccuracyMeter
M.AverageMeter = M.meters.AverageMeter
return M
