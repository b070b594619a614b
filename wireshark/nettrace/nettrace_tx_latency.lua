-- nettrace_tx_latency.lua - nettrace dissector: the stage latencies of
-- one TX skb (tskey) across its frames, and their fields.
--
-- seen[key][stage] = { ns = UInt64 global_ns, frame = frame number,
-- lat = the stage's own latency or nil } holds the latest event of each
-- stage of one skb, key = agent:cookie:tskey. It is filled only on the
-- first pass (pinfo.visited == false), in frame order; the latencies of
-- each event are stored in memo[frame][index] so a later re-dissection (GUI
-- click, tshark -2) shows the same values instead of recomputing against a
-- table that already holds later frames.
--
-- nettrace.lua loads this file and calls the function it returns with the
-- parts loaded before it; loaded on its own (as Wireshark loads every .lua
-- file of a plugin folder) it only returns that function.

return function(p)
    local F = p.fields.F
    local STAGE, signed_diff = p.common.STAGE, p.common.signed_diff

    local seen = {}
    local memo = {}

    local function reset_state()
        seen = {}
        memo = {}
    end

    -- Which latency field each stage fills, and from which earlier stages
    -- (the first one seen wins).
    local LAT_RULES = {
        [STAGE.SCHED] = { field = "lat_sched", from = { STAGE.SENDMSG } },
        [STAGE.SND_SW] = { field = "lat_snd_sw", from = { STAGE.SCHED } },
        [STAGE.SND_HW] = { field = "lat_snd_hw", from = { STAGE.SCHED } },
        [STAGE.ACK] = { field = "lat_ack", from = { STAGE.SND_SW, STAGE.SND_HW, STAGE.SCHED } },
    }
    local LAT_STAGES = { STAGE.SCHED, STAGE.SND_SW, STAGE.SND_HW, STAGE.ACK }

    -- The stage's own latency { field, value = Int64, ref = frame } or nil.
    local function own_latency(stages, stage, ns)
        local rule = LAT_RULES[stage]
        if rule == nil then
            return nil
        end
        for _, from in ipairs(rule.from) do
            local prev = stages[from]
            if prev ~= nil then
                return { field = rule.field, value = signed_diff(ns, prev.ns), ref = prev.frame }
            end
        end
        return nil
    end

    -- Latencies of one event; records it in `seen`. Returns
    -- { own = own latency or nil, stages = { latency, ... } (own and those of
    -- the skb's earlier stages, in path order, so that an ACK frame carries the
    -- whole breakdown and `stage == SND_SW && lat.sched_ns > N` works),
    -- total = Int64 or nil }.
    local function compute_latency(key, stage, ns, frame)
        local stages = seen[key]
        if stages == nil then
            stages = {}
            seen[key] = stages
        end
        local own = own_latency(stages, stage, ns)
        local first = stages[STAGE.SENDMSG]
        stages[stage] = { ns = ns, frame = frame, lat = own }

        local lat = { own = own, stages = {} }
        for _, s in ipairs(LAT_STAGES) do
            if stages[s] ~= nil and stages[s].lat ~= nil then
                lat.stages[#lat.stages + 1] = stages[s].lat
            end
        end
        if stage ~= STAGE.SENDMSG and first ~= nil then
            lat.total = signed_diff(ns, first.ns)
        end
        return lat
    end

    -- Latencies of event `index` of this frame: computed on the first pass,
    -- looked up afterwards.
    local function event_latency(pinfo, index, key, stage, ns)
        local per_frame = memo[pinfo.number]
        if not pinfo.visited then
            if per_frame == nil then
                per_frame = {}
                memo[pinfo.number] = per_frame
            end
            per_frame[index] = compute_latency(key, stage, ns, pinfo.number)
        end
        return per_frame and per_frame[index] or { stages = {} }
    end

    -- Latency fields of one event, generated (not in the bytes): they point at
    -- the event's global_ns bytes. Latencies of earlier stages say which frame
    -- they belong to.
    local function add_latency(tree, range, lat)
        for _, l in ipairs(lat.stages) do
            local item = tree:add(F[l.field], range, l.value)
            item:set_generated()
            if l ~= lat.own then
                item:append_text(" (earlier stage)")
            end
        end
        if lat.own ~= nil then
            tree:add(F.lat_ref_frame, range, lat.own.ref):set_generated()
        end
        if lat.total ~= nil then
            tree:add(F.lat_total, range, lat.total):set_generated()
        end
    end

    return { reset_state = reset_state, event_latency = event_latency, add_latency = add_latency }
end
