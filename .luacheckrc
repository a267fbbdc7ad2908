-- luacheck configuration: LuaJIT globals everywhere, busted's in specs.
std = 'luajit'
max_line_length = 130
files['spec'] = { std = '+busted', globals = { 'H' } }
files['spec/helper.lua'] = { globals = { 'H' } }
