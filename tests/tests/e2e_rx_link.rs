//! RX linking on real traffic: an iperf3 TCP flow between two namespaces,
//! tracer-agent `--probes rx` on the receiver, the sink's pcapng decoded by
//! tshark with the dissector; on every frame, the links the dissector shows
//! (`nettrace.rx.first_frame`, `prev_frame`, `lat.*`, `skb_*`) must equal
//! the linking rule of docs/reading-a-trace.md computed here, in Rust, from
//! the same file. The crafted frames of dissector_rx.rs cover the rule's
//! corner cases; this covers what the kernel really emits (GRO ranges,
//! coalesced receive-queue skbs, reads spanning skbs, the iperf3 control
//! connection beside the data connection, the agent's own UDP).

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use tracer_codec::{Event, RxEvent, RxStage};
use tracer_e2e::bins::bin;
use tracer_e2e::netns::NetnsPair;
use tracer_e2e::procs::{run, Proc};
use tracer_e2e::scenario::{spawn_sink, stop_json, SINK_PORT};
use tracer_e2e::skip::{require_root, skip};
use tracer_e2e::tshark::{Query, Row, Tshark};

const PORT: u16 = 5311;
/// Skbs the dissector keeps waiting for one socket stage, per flow
/// (RX_MAX_PENDING in wireshark/nettrace/nettrace_rx_links.lua): the
/// oldest beyond it are let go.
const MAX_PENDING: usize = 4096;
const TCP: u8 = 6;

/// One link as a frame shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Link {
    first: u64,
    prev: Option<u64>,
    prev_ns: Option<i64>,
    /// (stage, ns since the skb's STACK_ENTRY), in stage order.
    since_entry: Vec<(RxStage, i64)>,
    skb_seq: u32,
    skb_end_seq: u32,
    count: u32,
}

/// The receiver's flow as the packet travelled, per agent: what names an
/// skb together with its range.
type FlowKey = (u64, u8, [u8; 16], u16, [u8; 16], u16);

/// An skb as the rule names it.
struct Skb {
    key: FlowKey,
    seq: u32,
    end_seq: u32,
    /// Frame number that started it.
    first: u64,
    /// (frame number, global ns) of each stage it has.
    at: [Option<(u64, u64)>; 5],
}

/// The documented rule's state over one file.
#[derive(Default)]
struct Model {
    skbs: Vec<Skb>,
    /// Latest skb of each (flow, seq, end_seq).
    by_range: HashMap<(FlowKey, u32, u32), usize>,
    /// Per flow and socket stage (DATA_READY, COPY, READ_DONE): the data
    /// skbs still waiting for it, oldest first.
    pending: HashMap<FlowKey, [Vec<usize>; 3]>,
}

impl Model {
    fn start(&mut self, key: FlowKey, e: &RxEvent, frame: u64) {
        let mut at = [None; 5];
        at[e.stage as usize] = Some((frame, e.global_ns));
        self.skbs.push(Skb {
            key,
            seq: e.seq,
            end_seq: e.end_seq,
            first: frame,
            at,
        });
        let j = self.skbs.len() - 1;
        self.by_range.insert((key, e.seq, e.end_seq), j);
        if e.end_seq != e.seq {
            for list in self.pending.entry(key).or_default().iter_mut() {
                list.push(j);
                if list.len() > MAX_PENDING {
                    list.remove(0);
                }
            }
        }
    }

    /// The link frame `frame` shows for TCP event `e` of `agent`.
    fn link(&mut self, agent: u64, e: &RxEvent, frame: u64) -> Option<Link> {
        let key: FlowKey = (agent, e.family, e.saddr, e.sport, e.daddr, e.dport);
        let stage = e.stage as usize;
        let reaches = |end: u32, s: u32| end.wrapping_sub(s) < 1 << 31;
        let mine: Vec<usize> = match stage {
            0 => {
                self.start(key, e, frame);
                return None;
            }
            1 => match self.by_range.get(&(key, e.seq, e.end_seq)) {
                Some(&j) if self.skbs[j].at[1].is_none() => vec![j],
                _ => {
                    self.start(key, e, frame);
                    return None;
                }
            },
            _ => {
                let skbs = &self.skbs;
                let list = &mut self.pending.get_mut(&key)?[stage - 2];
                let (taken, kept): (Vec<usize>, Vec<usize>) = list.iter().partition(|&&j| {
                    skbs[j].at[stage].is_none() && reaches(e.end_seq, skbs[j].end_seq)
                });
                *list = kept;
                taken
            }
        };
        let s = &self.skbs[*mine.first()?];
        let prev = (0..stage).rev().find_map(|p| s.at[p]);
        let mut since_entry = Vec::new();
        if let Some((_, entry_ns)) = s.at[0] {
            for p in 1..=stage {
                let t = if p == stage {
                    Some(e.global_ns)
                } else {
                    s.at[p].map(|a| a.1)
                };
                if let Some(t) = t {
                    since_entry.push((RxStage::ALL[p], t as i64 - entry_ns as i64));
                }
            }
        }
        let link = Link {
            first: s.first,
            prev: prev.map(|p| p.0),
            prev_ns: prev.map(|p| e.global_ns as i64 - p.1 as i64),
            since_entry,
            skb_seq: s.seq,
            skb_end_seq: s.end_seq,
            count: mine.len() as u32,
        };
        for j in mine {
            self.skbs[j].at[stage] = Some((frame, e.global_ns));
        }
        Some(link)
    }
}

/// The documented rule (docs/reading-a-trace.md), over every frame of a
/// file in order (frame numbers from 1): `events[i]` is frame i+1's RX
/// event with its agent, None for other kinds. Returns the link each frame
/// shows, and the skbs with the stages they got.
///   * STACK_ENTRY starts an skb;
///   * TCP_INPUT joins the latest skb of its agent, flow and exact range
///     if that one has no TCP_INPUT yet, else starts one;
///   * DATA_READY, COPY, READ_DONE are the stage of every data skb of the
///     agent and flow still waiting for that stage whose end_seq the
///     event's end_seq reaches (mod 2^32), shown on the oldest;
///   * only TCP events link; at most MAX_PENDING skbs wait per stage.
fn expected_links(events: &[Option<(u64, RxEvent)>]) -> (Vec<Option<Link>>, Vec<Skb>) {
    let mut m = Model::default();
    let links = events
        .iter()
        .enumerate()
        .map(|(i, ev)| match ev {
            Some((agent, e)) if e.protocol == TCP => m.link(*agent, e, i as u64 + 1),
            _ => None,
        })
        .collect();
    (links, m.skbs)
}

const LINK_FIELDS: &[&str] = &[
    "frame.number",
    "nettrace.rx.first_frame",
    "nettrace.rx.prev_frame",
    "nettrace.rx.lat.prev_ns",
    "nettrace.rx.lat.tcp_input_ns",
    "nettrace.rx.lat.data_ready_ns",
    "nettrace.rx.lat.copy_ns",
    "nettrace.rx.lat.read_done_ns",
    "nettrace.rx.skb_seq",
    "nettrace.rx.skb_end_seq",
    "nettrace.rx.skb_count",
];

/// The link tshark shows on one row, or None when it shows none.
fn shown_link(row: &Row) -> Option<Link> {
    let first = row.opt("nettrace.rx.first_frame")?;
    let num = |f: &str| row.opt(f).map(|v| v.parse::<i64>().expect(f));
    let since_entry = RxStage::ALL[1..]
        .iter()
        .filter_map(|s| {
            num(&format!("nettrace.rx.lat.{}_ns", s.name().to_lowercase())).map(|v| (*s, v))
        })
        .collect();
    Some(Link {
        first: first.parse().expect("first_frame"),
        prev: num("nettrace.rx.prev_frame").map(|v| v as u64),
        prev_ns: num("nettrace.rx.lat.prev_ns"),
        since_entry,
        skb_seq: row.one("nettrace.rx.skb_seq").parse().expect("skb_seq"),
        skb_end_seq: row
            .one("nettrace.rx.skb_end_seq")
            .parse()
            .expect("skb_end_seq"),
        count: row.one("nettrace.rx.skb_count").parse().expect("skb_count"),
    })
}

#[test]
fn rx_links_of_an_iperf3_flow_match_the_rule() {
    if !require_root() {
        return;
    }
    let Some(tshark) = Tshark::or_skip("rx_links_of_an_iperf3_flow_match_the_rule") else {
        return;
    };
    if Command::new("iperf3").arg("--version").output().is_err() {
        skip("iperf3 not installed (scripts/setup.sh installs it)");
        return;
    }
    let pair = NetnsPair::create("ntrrxl", 244).expect("creating namespaces");
    let out = tempfile::tempdir().unwrap();
    let mut sink = spawn_sink(&pair, out.path(), &[]);
    let mut agent = {
        let mut cmd = NetnsPair::exec(&pair.b, &bin("tracer-agent"));
        cmd.args(["--sink", &format!("{}:{SINK_PORT}", pair.addr_b)])
            .args(["--probes", "rx", "--hostname", "receiver", "--json"]);
        let mut p = Proc::spawn("tracer-agent", cmd);
        p.wait_stderr("rx probe attached", Duration::from_secs(30));
        p
    };
    let mut server = {
        let mut cmd = NetnsPair::exec(&pair.b, std::path::Path::new("iperf3"));
        cmd.args([
            "-s",
            "-1",
            "-B",
            &pair.addr_b.to_string(),
            "-p",
            &PORT.to_string(),
        ]);
        Proc::spawn("iperf3 -s", cmd)
    };
    // One second at a rate the 2-core machine sustains while tracing
    // every skb without ring loss; 16 KiB writes, so reads span skbs.
    let (addr, port) = (pair.addr_b.to_string(), PORT.to_string());
    let args = [
        "-c", &addr, "-p", &port, "-t", "1", "-b", "300M", "-l", "16K",
    ];
    let mut ok = false;
    for _ in 0..20 {
        // The server may not listen yet.
        std::thread::sleep(Duration::from_millis(100));
        let mut client = NetnsPair::exec(&pair.a, std::path::Path::new("iperf3"));
        client.args(args);
        let (st, out, err) = run(client);
        if st.success() {
            ok = true;
            break;
        }
        assert!(
            !out.contains("Connected"),
            "iperf3 failed after connecting: {out}{err}"
        );
    }
    assert!(ok, "iperf3 client never connected");
    std::thread::sleep(Duration::from_millis(300));
    let agent_final = stop_json(&mut agent, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(200));
    stop_json(&mut sink, libc::SIGTERM);
    drop(server.stop(libc::SIGTERM, Duration::from_secs(5)));
    assert_eq!(
        agent_final["stats"]["bpf"]["ringbuf_lost"], 0,
        "{agent_final}"
    );
    assert_eq!(agent_final["stats"]["ring_overruns"], 0, "{agent_final}");

    let trace = tracer_e2e::pcap::read_dir(out.path());
    assert_eq!(trace.files.len(), 1, "frame numbers are per file");
    let events: Vec<Option<(u64, RxEvent)>> = trace
        .frames
        .iter()
        .map(|f| match &f.event {
            Event::Rx(e) => Some((f.agent_id, *e)),
            _ => None,
        })
        .collect();
    let (want, skbs) = expected_links(&events);
    let rows = tshark
        .fields(&trace.files[0], LINK_FIELDS, &Query::default())
        .expect("tshark decodes the trace cleanly");
    assert_eq!(rows.len(), events.len(), "one row per frame");
    let mut mismatches = Vec::new();
    for (i, (row, want)) in rows.iter().zip(&want).enumerate() {
        assert_eq!(row.one("frame.number"), (i + 1).to_string());
        let shown = shown_link(row);
        if shown != *want {
            mismatches.push((i + 1, shown, want.clone()));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} frames link differently from the rule; first ones: {:#?}",
        mismatches.len(),
        rows.len(),
        &mismatches[..mismatches.len().min(5)]
    );

    // The agreement is not vacuous: the data connection's skbs (the flow
    // into PORT with the most stack-entry bytes) are followed to the read.
    let mut bytes: HashMap<u16, u64> = HashMap::new();
    for (_, e) in events.iter().flatten() {
        if e.protocol == TCP && e.dport == PORT && e.stage == RxStage::StackEntry as u8 {
            *bytes.entry(e.sport).or_default() += u64::from(e.end_seq.wrapping_sub(e.seq));
        }
    }
    let (&data_port, &data_bytes) = bytes
        .iter()
        .max_by_key(|(_, b)| **b)
        .expect("no TCP into the iperf3 port");
    assert!(
        data_bytes > 10 << 20,
        "only {data_bytes} bytes at stack entry"
    );
    let key_port = |k: &FlowKey| k.3;
    let data: Vec<&Skb> = skbs
        .iter()
        .filter(|s| key_port(&s.key) == data_port && s.end_seq != s.seq && s.at[0].is_some())
        .collect();
    let complete = data
        .iter()
        .filter(|s| s.at.iter().all(Option::is_some))
        .count();
    let mut read_ns: Vec<i64> = data
        .iter()
        .filter_map(|s| Some(s.at[4]?.1 as i64 - s.at[0]?.1 as i64))
        .collect();
    read_ns.sort_unstable();
    let (mut linked, mut negative) = (0usize, 0usize);
    for (ev, link) in events.iter().zip(&want) {
        if let (Some((_, e)), Some(l)) = (ev, link) {
            if e.sport == data_port {
                linked += 1;
                negative += usize::from(l.prev_ns.is_some_and(|d| d < 0));
            }
        }
    }
    eprintln!(
        "data flow: {} data skbs, {complete} followed STACK_ENTRY..READ_DONE (median {} ns), \
         {linked} linked frames, {negative} steps back in time",
        data.len(),
        read_ns.get(read_ns.len() / 2).copied().unwrap_or(0)
    );
    assert!(
        complete * 10 >= data.len() * 9,
        "only {complete} of {} data skbs linked through every stage",
        data.len()
    );
    // Frames are in global-time order within the sink's window, so a step
    // back in time is at most a rare reordering.
    assert!(
        negative * 100 <= linked,
        "{negative} of {linked} links go back in time"
    );
}
