-- tarantool_many.lua: $NFIBERS fibers parked in fiber.sleep, for the
-- fibers benchmarks; prints "ready".
local fiber = require('fiber')
local n = tonumber(os.getenv('NFIBERS') or '10000')
local function park() fiber.sleep(100000) end
for _ = 1, n do fiber.create(park) end
print('ready')
io.stdout:flush()
fiber.sleep(100000)
