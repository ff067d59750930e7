-- tarantool_app.lua: Tarantool fibers parked in known places, for package
-- fibers' tests: three sleepers (fiber.sleep in nested Lua functions, the
-- inner one a vararg function), one waiter (a channel get three Lua calls
-- deep), one parked from JIT-compiled code (stitched); Tarantool's own
-- on_shutdown fiber has never run. fiber.info() goes to $FIBER_INFO
-- (YAML), then "ready" to stdout. $NAPS: fibers that nap and end (300).
local fiber = require('fiber')
box = nil
local function deep3(ch) ch:get() end
local function deep2(ch) deep3(ch) end
local function deep1(ch) deep2(ch) end
local ch = fiber.channel(1)
local function sleeper_inner(...) fiber.sleep(1000) end
local function sleeper() sleeper_inner(1, 2) end
for i = 1, 3 do
    local f = fiber.create(sleeper)
    f:name('sleeper' .. i)
end
local g = fiber.create(deep1, ch)
g:name('waiter')
-- nap, the function of 300 fibers that ended, is hot: LuaJIT traces it and
-- stitches the trace to fiber.sleep's call, which leaves a continuation
-- frame (FRAME_CONT) between the C function and nap.
local function nap(t) fiber.sleep(t) end
for _ = 1, tonumber(os.getenv('NAPS') or '300') do fiber.create(nap, 0) end
fiber.sleep(0.05)
fiber.create(nap, 1000):name('stitched')
local out = io.open(os.getenv('FIBER_INFO') or '/dev/null', 'w')
out:write(require('yaml').encode(fiber.info()))
out:close()
print('ready')
io.stdout:flush()
fiber.sleep(10000)
