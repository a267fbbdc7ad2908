-- twin_split_spec — the PyTorch twins of bench/ (ssl_reference_torch.py, dino_torch.py)
-- hold out the same training samples for data.val_split as crescent's Dataset:hold_out,
-- so a twin's kNN on the held-out split reads the very images crescent's does: the twin
-- re-derives crescent's Philox words in numpy. Without a python that has torch
-- (CRESCENT_TORCH_PYTHON, else build/torchenv/bin/python) this is one pending line.
local cr = H.cr
local data = cr.data

local PYTHON = os.getenv('CRESCENT_TORCH_PYTHON') or 'build/torchenv/bin/python'
local N, COUNTS = 6000, { '1000', '0.2', '1' }

local tmpdir = H.tmpdir('twin_split')
teardown(tmpdir.remove)

local export = H.python_fixture(PYTHON, 'torch, torchvision, numpy', 'spec/fixtures/twin_hold_out.py',
  tmpdir.dir .. ' ' .. N .. ' ' .. table.concat(COUNTS, ' '),
  PYTHON .. ' cannot import torch, torchvision and numpy (make torchenv, or CRESCENT_TORCH_PYTHON picks the python)')

describe('the PyTorch twins', function()
  it("hold out the same samples as data.val_split", function()
    local ok, why = export()
    if not ok then pending(why); return end
    local ids = {}
    for i = 1, N do ids[i] = i - 1 end
    local ds = data.TensorDataset { images = cr.zeros({ N, 1, 1 }, { dtype = 'u8' }),
                                    labels = cr.tensor(ids, { dtype = 'i64' }), mean = 0, std = 1,
                                    num_classes = N, name = 'ids' }
    local lines = {}
    for line in io.lines(tmpdir.path('held_out.txt')) do lines[#lines + 1] = line end
    assert.are.equal(#COUNTS, #lines)
    for i, c in ipairs(COUNTS) do
      local v = tonumber(c)
      local n_val = v < 1 and math.floor(v * N + 0.5) or v
      local _, held = ds:hold_out(n_val, 0)
      local twin = {}
      for id in lines[i]:match(':(.*)$'):gmatch('%d+') do twin[#twin + 1] = tonumber(id) end
      assert.are.equal(n_val, #twin)
      assert.are.same(held.labels:totable(), twin)
    end
  end)
end)
