-- Priority queue (EZK paper, section 3.2), owning the virtual node it is
-- registered at (say /queue; any path works, and each registration is a
-- queue of its own).
--
-- Insert: create "/queue/node-<prio>-" with the sequential flag and the
--   element as data. <prio> is a decimal integer (64-bit, may be negative);
--   smaller comes out first, equal priorities in insertion order.
-- Remove: getData "/queue/next" returns the head element's data and removes
--   it, atomically, in one call. NoNode when the queue is empty.
-- Everything else on /queue behaves like a regular node.
--
-- An element is stored as "node-<key>-<sequence>", where <key> sorts like the
-- priority: "n" and 19 digits of prio + 2^63 for a negative priority, "p" and
-- 19 digits of prio otherwise (so -1 is "n9223372036854775807" and 5 is
-- "p0000000000000000005"). The sequence suffix is fixed-width too, so the
-- names' byte order is (priority, insertion) order and the head is simply
-- the first element child: a dequeue costs O(log n), however long the queue.
-- The insert's reply names the stored node.

local QUEUE = EXTENSION.path
local NEXT = QUEUE .. "/next"
-- The path as a Lua pattern matching itself (its punctuation escaped).
local QUEUE_PATTERN = QUEUE:gsub("%p", "%%%0")
-- Element names lie between these (bytewise): "node-n..." and "node-p...".
local BEFORE_ELEMENTS = "node-m"
local LAST_KEY_TAG = string.byte("p")
local ELEMENT = "^node%-[np]%d+%-%-?%d+$"

-- "/queue/node-<prio>-" -> prio, or nil unless <prio> is a decimal integer
-- that fits 64 bits (tonumber gives a float for anything larger).
local function requested_priority(path)
  local digits = path:match("^" .. QUEUE_PATTERN .. "/node%-(%-?%d+)%-$")
  local prio = digits and tonumber(digits)
  if math.type(prio) == "integer" then return prio end
  return nil
end

-- The order-preserving, fixed-width name part of a priority.
local function key(prio)
  if prio < 0 then
    -- prio - mininteger = prio + 2^63, in 0 .. 2^63-1 for negative prio.
    return string.format("n%019d", prio - math.mininteger)
  end
  return string.format("p%019d", prio)
end

-- The first element child, or nil. Only children created before the
-- extension owned /queue can be anything but elements; any that sort among
-- the elements are skipped.
local function head(zk)
  local after = BEFORE_ELEMENTS
  while true do
    local name = zk.children(QUEUE, { after = after, limit = 1 })[1]
    if name == nil or name:sub(1, 5) ~= "node-" or name:byte(6) > LAST_KEY_TAG then
      return nil
    end
    if name:match(ELEMENT) then return name end
    after = name
  end
end

local function ensure_queue(zk)
  if not zk.exists(QUEUE) then zk.create(QUEUE, "") end
end

return {
  create = function(req, zk)
    if req.path == QUEUE then return zk.default(req) end
    -- Only well-formed, sequential element names may enter the queue.
    local prio = requested_priority(req.path)
    if not req.sequential or prio == nil then zk.fail("BadArguments") end
    ensure_queue(zk)
    local path, stat = zk.create(QUEUE .. "/node-" .. key(prio) .. "-", req.data, req.flags)
    return { path = path, stat = stat }
  end,

  getData = function(req, zk)
    if req.path ~= NEXT then return zk.default(req) end
    local name = head(zk) -- NoNode if there is no /queue
    if name == nil then zk.fail("NoNode") end
    local path = QUEUE .. "/" .. name
    local data, stat = zk.get(path)
    zk.delete(path, stat.version)
    return { data = data, stat = stat }
  end,
}
