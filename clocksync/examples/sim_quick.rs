//! scratch
use clocksync::sim::*;
use clocksync::*;
fn main() {
    for kind in [ServoKind::Pi, ServoKind::LinReg] {
        for reads in [1usize, 5] {
            let cfg = SimConfig {
                reads,
                ..Default::default()
            };
            let st = simulate(cfg, kind, ServoConfig::default(), 300);
            for s in st.iter().take(12) {
                println!(
                    "{:?} {:.0} {} {}",
                    kind,
                    s.t_s,
                    s.report.phc2sys_line(),
                    s.true_error_ns
                );
            }
            println!("{:?} reads={} {:?}", kind, reads, summarize(&st, 100));
        }
    }
}
