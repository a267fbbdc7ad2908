-- lint_spec — the Lua sources stay luacheck-clean, checked as part of make test.
describe('luacheck', function()
  it('finds no warnings in lua/, spec/, bench/, examples/, recipes/, tools/ and bin/crescent', function()
    local p = io.popen('luacheck --no-color --formatter plain lua spec bench examples recipes tools crescent.lua ' ..
      'bin/crescent 2>&1')
    local out = p:read('*a')
    p:close()
    assert.equal('', out, 'luacheck reported:\n' .. out)
  end)
end)
