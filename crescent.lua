-- crescent.lua — lets `require 'crescent'` work from the repository root with no
-- LUA_PATH set: it puts lua/ on package.path and loads lua/crescent/init.lua.
local root = (debug.getinfo(1, 'S').source:match('^@(.*)crescent%.lua$') or './')
if root == '' then root = './' end
package.path = root .. 'lua/?.lua;' .. root .. 'lua/?/init.lua;' .. package.path
return dofile(root .. 'lua/crescent/init.lua')
