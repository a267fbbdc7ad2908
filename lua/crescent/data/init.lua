-- crescent.data (cr.data) — data sets and loaders: the IDX reader, in-memory image
-- data sets (Fashion-MNIST, or any u8 images you hold), and the Loader that shuffles
-- them reproducibly per (seed, epoch) and assembles normalised batches in C.
-- Threaded decode/augment pipelines come with issue 4; this loader runs on the caller's
-- thread, but its batch assembly is one threaded C pass per batch.
local dataset = require 'crescent.data.dataset'

return {
  read_idx = dataset.read_idx,
  Dataset = dataset.Dataset,
  TensorDataset = dataset.TensorDataset,
  is_dataset = dataset.is_dataset,
  fashion_mnist = require 'crescent.data.fashion_mnist',
  Loader = require 'crescent.data.loader',
  cifar10 = require('crescent.data.cifar').cifar10,
  cifar100 = require('crescent.data.cifar').cifar100,
  synthetic = require 'crescent.data.synthetic',
  image_folder = require('crescent.data.image_folder').image_folder,
  images = require 'crescent.data.image_folder',   -- read/decode/probe/resize/write_jpeg/write_png
  transforms = require 'crescent.data.transforms',
}
