-- crescent.data (cr.data) — data sets and loaders: the IDX reader, in-memory image
-- data sets (Fashion-MNIST, CIFAR, image folders decoded up front, or any u8 images you
-- hold), streamed ones (image folders, file lists and tar shards whose images the
-- loader's worker threads decode), and the Loader that shuffles them reproducibly per (seed, epoch) and
-- assembles normalised batches and crops in C.
local dataset = require 'crescent.data.dataset'

return {
  read_idx = dataset.read_idx,
  Dataset = dataset.Dataset,
  TensorDataset = dataset.TensorDataset,
  is_dataset = dataset.is_dataset,
  fashion_mnist = require 'crescent.data.fashion_mnist',
  Loader = require 'crescent.data.loader',
  sampler = require 'crescent.data.sampler',   -- each rank's shard of an epoch (DistributedSampler)
  cifar10 = require('crescent.data.cifar').cifar10,
  cifar100 = require('crescent.data.cifar').cifar100,
  synthetic = require 'crescent.data.synthetic',
  image_folder = require('crescent.data.image_folder').image_folder,
  file_list = require 'crescent.data.file_list',
  tar_shards = require 'crescent.data.tar_shards',
  images = require 'crescent.data.image_folder',   -- read/decode/probe/resize/write_jpeg/write_png
  transforms = require 'crescent.data.transforms',
  sources = require 'crescent.data.sources',     -- the data sets of a recipe's data.* keys
}
