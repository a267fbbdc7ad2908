-- timm_import_spec — a timm Vision Transformer's state dict loads into nn.models.vit_tiny by
-- name: spec/fixtures/export_timm_vit.py writes a random-weight timm ViT-tiny (4 px patches,
-- 32 px, 1 channel, 10 classes) as safetensors with an input and timm's eval output;
-- cr.io.load_into takes every tensor strictly (the same names and shapes) and our output
-- equals timm's within 1e-4. Without a python that has torch and timm
-- (CRESCENT_TORCH_PYTHON, else build/torchenv/bin/python) this is one pending line.
local cr = H.cr
local nn = cr.nn

local PYTHON = os.getenv('CRESCENT_TORCH_PYTHON') or 'build/torchenv/bin/python'

local tmpdir = H.tmpdir('timm_import')
teardown(tmpdir.remove)

local export = H.python_fixture(PYTHON, 'torch, timm, safetensors', 'spec/fixtures/export_timm_vit.py', tmpdir.dir,
  PYTHON .. ' cannot import torch, timm and safetensors (make torchenv, then build/torchenv/bin/pip install timm; ' ..
  'or CRESCENT_TORCH_PYTHON picks the python)')

describe('timm ViT weights', function()
  it('load by name into vit_tiny, strictly, and give timm eval output', function()
    local ok, why = export()
    if not ok then pending(why); return end
    local model = nn.models.vit_tiny { img_size = 32, patch = 4, in_channels = 1, num_classes = 10 }
    local report = cr.io.load_into(model, tmpdir.path('vit_tiny.safetensors'), { strict = true })
    assert.are.equal(#model:named_parameters() + #model:named_buffers(), report.loaded)
    local io = cr.load(tmpdir.path('vit_tiny_io.safetensors'))
    model:eval()
    local y = cr.no_grad(function() return model(io.input) end)
    assert.is_true((y - io.output):abs():max():item() < 1e-4)
  end)
end)
