-- Assertion extension, owning the virtual node it is registered at (say
-- /validated; any path works): every create and setData below it must carry
-- a decimal integer between MIN and MAX; anything else is refused with
-- BadArguments and nothing is written. The node itself is created on first
-- use and takes any data.

local ROOT = EXTENSION.path
local MIN, MAX = 0, 1000

local function valid(data)
  local n = math.tointeger(tonumber(data))
  return n ~= nil and n >= MIN and n <= MAX and data:match("^%-?%d+$") ~= nil
end

local function guard(req, zk)
  if req.path ~= ROOT and not valid(req.data) then zk.fail("BadArguments") end
  return zk.default(req)
end

return {
  create = function(req, zk)
    if req.path ~= ROOT and not zk.exists(ROOT) then zk.create(ROOT, "") end
    return guard(req, zk)
  end,
  setData = guard,
}
