-- tools/make_image_folder.lua — writes a small demo image data set in the three streamed
-- layouts the recipes read, from crescent's learnable synthetic images (JPEG, quality 90):
--   <dir>/train/<class>/<n>.jpg and <dir>/val/<class>/<n>.jpg   (data.name=image_folder)
--   <dir>/train.txt and <dir>/val.txt, '<path> <label>' lines   (data.name=file_list)
--   <dir>/shards/train-{000..001}.tar, val-000.tar              (data.name=tar_shards)
--   luajit tools/make_image_folder.lua data/demo [images per class, default 100]
package.path = 'lua/?.lua;lua/?/init.lua;' .. package.path
local cr = require 'crescent'

local dir, per_class = arg[1], tonumber(arg[2] or 100)
if not dir or not per_class or per_class < 2 or per_class ~= math.floor(per_class) then
  io.stderr:write('usage: luajit tools/make_image_folder.lua <dir> [images per class >= 2, default 100]\n')
  os.exit(2)
end
local CLASSES = 4
local function sh(cmd) assert(os.execute(cmd) == 0, 'failed: ' .. cmd) end
local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- one split: its images, list file and shards (n_shards tar files of webdataset samples)
local function split(name, n_per_class, seed, n_shards)
  local ds = cr.data.synthetic { n = n_per_class * CLASSES, shape = { 3, 48, 64 }, num_classes = CLASSES, seed = seed }
  local labels = ds.labels:totable()
  local lines, stage = {}, dir .. '/shards/.stage-' .. name
  sh('mkdir -p ' .. quote(stage))
  for c = 0, CLASSES - 1 do sh('mkdir -p ' .. quote(string.format('%s/%s/class%d', dir, name, c))) end
  for i = 1, #ds do
    local rel = string.format('%s/class%d/%05d.jpg', name, labels[i], i)
    cr.data.images.write_jpeg(ds.images:select(0, i - 1), dir .. '/' .. rel, 90)
    lines[#lines + 1] = rel .. ' ' .. labels[i]
    local key = string.format('%s/%d/%05d', stage, (i - 1) % n_shards, i)
    sh('mkdir -p ' .. quote(key:match('^(.*)/')))
    sh(string.format('cp %s %s.jpg', quote(dir .. '/' .. rel), quote(key)))
    local f = assert(io.open(key .. '.cls', 'w'))
    f:write(labels[i], '\n')
    f:close()
  end
  local f = assert(io.open(dir .. '/' .. name .. '.txt', 'w'))
  f:write(table.concat(lines, '\n'), '\n')
  f:close()
  for s = 0, n_shards - 1 do
    local tar = string.format('%s/shards/%s-%03d.tar', dir, name, s)
    sh(string.format('cd %s && tar -cf %s $(ls | sort)', quote(stage .. '/' .. s), quote(tar)))
  end
  sh('rm -rf ' .. quote(stage))
  return #ds
end

sh('mkdir -p ' .. quote(dir .. '/shards'))
local abs = io.popen('cd ' .. quote(dir) .. ' && pwd'):read('*l')
dir = abs
local n_train = split('train', per_class, 1, 2)
local n_val = split('val', math.max(2, math.floor(per_class / 4)), 2, 1)
print(string.format('%s: %d training and %d validation images of 4 classes (48x64 JPEG): train/ and val/ class ' ..
  'folders, train.txt and val.txt, shards/train-{000..001}.tar and shards/val-000.tar', dir, n_train, n_val))
