-- nettrace_rx_links.lua - nettrace dissector: links between the RX
-- frames of one received TCP skb, with its stage latencies, and their
-- fields.
--
-- The RX frames of one received TCP skb are linked, like the TX stages of
-- one tskey, in frame order on the first pass and memoized per frame (as
-- in nettrace_tx_latency.lua). An skb is named by (agent, flow, seq..end_seq): the flow as the
-- packet went, so the receiver's socket stages, which show the socket's
-- view in the same direction, name the same flow.
--   * STACK_ENTRY starts an skb.
--   * TCP_INPUT carries the same seq..end_seq: it joins the latest skb of
--     that range that has no TCP_INPUT yet; without one (STACK_ENTRY not
--     recorded) it starts the skb itself.
--   * DATA_READY (end_seq = rcv_nxt), COPY (the range of the receive-queue
--     skb, which contains the skb's range) and READ_DONE (end_seq =
--     copied_seq): the stage of every skb of the flow that carries data,
--     lacks that stage, and whose end_seq the event's end_seq reaches (mod
--     2^32) -- i.e. the first event of that stage covering the skb's last
--     byte. One such event may be the stage of several skbs (a read of many
--     segments); its frame shows the oldest of them (the one that waited
--     longest) and how many there are; the others still link to it.
-- Latencies are of global_ns: from the skb's STACK_ENTRY (per stage:
-- nettrace.rx.lat.<stage>_ns, the earlier stages' values repeated as on
-- TX) and from its previous recorded stage (nettrace.rx.lat.prev_ns).
--
-- nettrace.lua loads this file and calls the function it returns with the
-- parts loaded before it; loaded on its own (as Wireshark loads every .lua
-- file of a plugin folder) it only returns that function.

return function(p)
    local F = p.fields.F
    local c = p.common
    local RX_STAGE, signed_diff = c.RX_STAGE, c.signed_diff
    local SEQ_SPACE, seq_unwrap = c.SEQ_SPACE, c.seq_unwrap

    -- Stage numbers run in path order; these are the socket stages matched by
    -- end_seq, and the field of each stage's latency from STACK_ENTRY.
    local RX_SOCKET_STAGES = { RX_STAGE.DATA_READY, RX_STAGE.COPY, RX_STAGE.READ_DONE }
    local RX_LAT_FIELDS = {
        [RX_STAGE.TCP_INPUT] = "rx_lat_tcp_input",
        [RX_STAGE.DATA_READY] = "rx_lat_data_ready",
        [RX_STAGE.COPY] = "rx_lat_copy",
        [RX_STAGE.READ_DONE] = "rx_lat_read_done",
    }
    -- Skbs of one flow still waiting for a socket stage: bounded, so that a
    -- stage never recorded (a filtered or lost event) costs no more than this;
    -- past it the one that ends first (the oldest, in order) is given up.
    local RX_MAX_PENDING = 4096

    local rx_by_range = {} -- "agent|flow|seq|end_seq" -> latest skb of that range
    -- "agent|flow" -> { stage -> heap of the skbs lacking it, by end_seq
    -- unwrapped (then frame); ref_s, ref_x: the flow's unwrapping }. A heap
    -- keeps every event's cost logarithmic however the ranges come (a
    -- crafted trace can send them in any order).
    local rx_pending = {}
    local rx_memo = {} -- frame -> index -> link or false (see rx_event_link)

    local function reset_rx_state()
        rx_by_range, rx_pending, rx_memo = {}, {}, {}
    end

    -- A binary min-heap of skbs ordered by (x = unwrapped end_seq, first).
    local function skb_before(a, b)
        return a.x < b.x or (a.x == b.x and a.first < b.first)
    end

    local function heap_push(h, v)
        local i = #h + 1
        h[i] = v
        while i > 1 do
            local up = math.floor(i / 2)
            if not skb_before(h[i], h[up]) then
                break
            end
            h[i], h[up] = h[up], h[i]
            i = up
        end
    end

    local function heap_pop(h)
        local top, n = h[1], #h
        -- Two statements: with n == 1 a multiple assignment to h[1] and h[n]
        -- would leave the order of its stores to Lua.
        h[1] = h[n]
        h[n] = nil
        n = n - 1
        local i = 1
        while true do
            local l, small = 2 * i, i
            if l <= n and skb_before(h[l], h[small]) then
                small = l
            end
            if l + 1 <= n and skb_before(h[l + 1], h[small]) then
                small = l + 1
            end
            if small == i then
                return top
            end
            h[i], h[small] = h[small], h[i]
            i = small
        end
    end

    local function by_first(a, b) return a.first < b.first end

    local function rx_new_skb(flow, seq, end_seq, stage, ns, frame)
        local skb = { seq = seq, end_seq = end_seq, first = frame, at = { [stage] = { ns = ns, frame = frame } } }
        rx_by_range[flow .. "|" .. seq .. "|" .. end_seq] = skb
        if end_seq ~= seq then
            local pending = rx_pending[flow]
            if pending == nil then
                pending = {}
                for _, s in ipairs(RX_SOCKET_STAGES) do
                    pending[s] = {}
                end
                rx_pending[flow] = pending
            end
            skb.x = seq_unwrap(pending, end_seq, SEQ_SPACE)
            for _, s in ipairs(RX_SOCKET_STAGES) do
                local heap = pending[s]
                heap_push(heap, skb)
                if #heap > RX_MAX_PENDING then
                    heap_pop(heap)
                end
            end
        end
        return skb
    end

    -- The skbs whose `stage` this event is (oldest first), taken off the
    -- heap: those whose end_seq the event's end_seq reaches.
    local function rx_take_reached(flow, stage, end_seq)
        local pending = rx_pending[flow]
        if pending == nil then
            return {}
        end
        local heap, reached = pending[stage], {}
        local x = seq_unwrap(pending, end_seq, SEQ_SPACE)
        while heap[1] ~= nil and heap[1].x <= x do
            local skb = heap_pop(heap)
            if skb.at[stage] == nil then
                reached[#reached + 1] = skb
            end
        end
        table.sort(reached, by_first)
        return reached
    end

    -- The link shown on a frame of `skb` at `stage`: what it knew then.
    local function rx_link_of(skb, stage, ns, count)
        local link = { first = skb.first, seq = skb.seq, end_seq = skb.end_seq, count = count, stages = {} }
        for s = stage - 1, 0, -1 do
            local at = skb.at[s]
            if at ~= nil then
                link.prev, link.prev_ns, link.prev_stage = at.frame, signed_diff(ns, at.ns), s
                break
            end
        end
        local entry = skb.at[RX_STAGE.STACK_ENTRY]
        if entry ~= nil then
            for s = RX_STAGE.TCP_INPUT, stage do
                local at = s == stage and { ns = ns } or skb.at[s]
                if at ~= nil then
                    link.stages[#link.stages + 1] = { field = RX_LAT_FIELDS[s], value = signed_diff(at.ns, entry.ns),
                        own = s == stage }
                end
            end
        end
        return link
    end

    -- Links one TCP RX event into its skb(s); returns its link or nil.
    local function rx_compute_link(flow, stage, seq, end_seq, ns, frame)
        if stage == RX_STAGE.STACK_ENTRY then
            rx_new_skb(flow, seq, end_seq, stage, ns, frame)
            return nil
        elseif stage == RX_STAGE.TCP_INPUT then
            local skb = rx_by_range[flow .. "|" .. seq .. "|" .. end_seq]
            if skb == nil or skb.at[stage] ~= nil then
                rx_new_skb(flow, seq, end_seq, stage, ns, frame)
                return nil
            end
            local link = rx_link_of(skb, stage, ns, 1)
            skb.at[stage] = { ns = ns, frame = frame }
            return link
        end
        local reached = rx_take_reached(flow, stage, end_seq)
        if #reached == 0 then
            return nil
        end
        local link = rx_link_of(reached[1], stage, ns, #reached)
        for _, skb in ipairs(reached) do
            skb.at[stage] = { ns = ns, frame = frame }
        end
        return link
    end

    -- The link of event `index` of this frame: computed on the first pass,
    -- looked up afterwards.
    local function rx_event_link(pinfo, index, flow, stage, seq, end_seq, ns)
        local per_frame = rx_memo[pinfo.number]
        if not pinfo.visited then
            if per_frame == nil then
                per_frame = {}
                rx_memo[pinfo.number] = per_frame
            end
            per_frame[index] = rx_compute_link(flow, stage, seq, end_seq, ns, pinfo.number) or false
        end
        return per_frame and per_frame[index] or nil
    end

    -- Link fields of one RX event, generated: they point at its global_ns.
    local function add_rx_link(tree, range, link)
        tree:add(F.rx_first_frame, range, link.first):set_generated()
        if link.prev ~= nil then
            tree:add(F.rx_prev_frame, range, link.prev):set_generated()
            tree:add(F.rx_lat_prev, range, link.prev_ns):set_generated()
        end
        for _, l in ipairs(link.stages) do
            local item = tree:add(F[l.field], range, l.value)
            item:set_generated()
            if not l.own then
                item:append_text(" (earlier stage)")
            end
        end
        tree:add(F.rx_skb_seq, range, link.seq):set_generated()
        tree:add(F.rx_skb_end_seq, range, link.end_seq):set_generated()
        tree:add(F.rx_skb_count, range, link.count):set_generated()
    end

    return { reset_rx_state = reset_rx_state, rx_event_link = rx_event_link, add_rx_link = add_rx_link }
end
