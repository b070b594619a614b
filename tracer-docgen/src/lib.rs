//! Man pages and shell completions of the nettrace binaries, generated from
//! each binary's own clap definition.
//!
//! Every shipped binary calls [`run_if_asked`] with its `Cli::command`
//! before it parses its command line, in the manner of ripgrep's
//! `--generate`: `tracer-agent --generate man` prints the agent's man page,
//! `--generate bash|zsh|fish` a completion script. The packaging script
//! (scripts/package.sh) runs that on the binaries it ships, so a page can
//! never describe other options than the program has.
//!
//! `--generate` is read before, and apart from, the binary's own parser:
//! it is for packagers, so it is in none of the binary's `--help` (which
//! tests/tests/cli_values.rs reads), man page or completions (clap_complete
//! lists even hidden options), and the agent's required `--sink`/`--write`
//! group does not stand in its way. It must be the first argument.

use std::ffi::OsString;
use std::io::Write;

use clap::{Arg, Command, ValueEnum};
use clap_complete::Shell;

/// What `--generate` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Generate {
    /// The man page, section 1, in roff.
    Man,
    /// A bash completion script (for /usr/share/bash-completion/completions).
    Bash,
    /// A zsh completion function (for a directory of `$fpath`).
    Zsh,
    /// A fish completion script (for fish's vendor_completions.d).
    Fish,
}

/// Whether the first argument after the program name is `--generate`.
fn generate_first(args: &[OsString]) -> bool {
    args.get(1).is_some_and(|a| {
        let a = a.to_string_lossy();
        a == "--generate" || a.starts_with("--generate=")
    })
}

/// When the first argument of `args` (the program name first) is
/// `--generate`: what it asks for, or clap's usage error. `None` otherwise:
/// the binary parses its command line as usual.
pub fn asked(
    name: &str,
    args: impl IntoIterator<Item = OsString>,
) -> Option<Result<Generate, clap::Error>> {
    let args: Vec<OsString> = args.into_iter().collect();
    if !generate_first(&args) {
        return None;
    }
    let parser = Command::new("generate")
        .bin_name(name.to_owned())
        .about("Print this program's man page or a shell completion script")
        .arg(
            Arg::new("generate")
                .long("generate")
                .value_name("KIND")
                .required(true)
                .value_parser(clap::builder::EnumValueParser::<Generate>::new()),
        );
    Some(parser.try_get_matches_from(args).map(|m| {
        *m.get_one::<Generate>("generate")
            .expect("a required option has a value")
    }))
}

/// When the process was started with `--generate KIND` first: print what
/// it asks for about `cmd()` (the binary's `Cli::command`) on standard
/// output and exit (0; 2 on a usage error, as clap). Otherwise return, and
/// the binary goes on.
pub fn run_if_asked(cmd: impl FnOnce() -> Command) {
    let args: Vec<OsString> = std::env::args_os().collect();
    // Every normal start of the binary returns here, before its command
    // is built once more than its own parser builds it.
    if !generate_first(&args) {
        return;
    }
    let cmd = cmd();
    let what = match asked(cmd.get_name(), args) {
        None => return,
        Some(Ok(what)) => what,
        Some(Err(e)) => e.exit(),
    };
    let mut out = std::io::stdout().lock();
    match write(cmd, what, &mut out).and_then(|()| out.flush()) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("--generate: cannot write to standard output: {e}");
            std::process::exit(1)
        }
    }
}

/// Write what `what` asks for about `cmd` to `out`.
pub fn write(mut cmd: Command, what: Generate, out: &mut dyn Write) -> std::io::Result<()> {
    // A completion names the command it completes: the installed binary's
    // name, which each binary sets with `#[command(name = ...)]`.
    let name = cmd.get_name().to_owned();
    let shell = match what {
        Generate::Man => return clap_mangen::Man::new(cmd).render(out),
        Generate::Bash => Shell::Bash,
        Generate::Zsh => Shell::Zsh,
        Generate::Fish => Shell::Fish,
    };
    // Into memory first: clap_complete panics on a write error (a closed
    // pipe); writing the buffer reports it instead.
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    out.write_all(&script)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// A command line like the agent's: a required group of outputs.
    #[derive(Debug, Parser)]
    #[command(name = "demo", version, group = clap::ArgGroup::new("out").required(true))]
    struct Demo {
        /// Where events go.
        #[arg(long, value_name = "HOST:PORT", group = "out")]
        sink: Option<String>,
        /// Scrape address.
        #[arg(long, value_name = "ADDR:PORT")]
        metrics: Option<String>,
    }

    fn text(what: Generate) -> String {
        let mut out = Vec::new();
        write(Demo::command(), what, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn ask(args: &[&str]) -> Option<Result<Generate, clap::Error>> {
        asked("demo", args.iter().map(OsString::from))
    }

    #[test]
    fn generate_is_read_first_and_alone() {
        assert_eq!(
            ask(&["demo", "--generate", "man"]).unwrap().unwrap(),
            Generate::Man
        );
        assert_eq!(
            ask(&["demo", "--generate=zsh"]).unwrap().unwrap(),
            Generate::Zsh
        );
        assert!(ask(&["demo", "--sink", "h:1"]).is_none());
        assert!(ask(&["demo"]).is_none());
        // A run's options never ride along, and a bad kind is a usage error.
        let e = ask(&["demo", "--generate", "man", "--sink", "h:1"])
            .unwrap()
            .unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let e = ask(&["demo", "--generate", "troff"]).unwrap().unwrap_err();
        assert!(e.to_string().contains("man, bash, zsh, fish"), "{e}");
    }

    #[test]
    fn pages_and_completions_hold_the_options_and_not_generate() {
        let man = text(Generate::Man);
        assert!(man.starts_with(".ie") || man.starts_with(".TH"), "{man}");
        assert!(
            man.contains("metrics") && !man.contains("generate"),
            "{man}"
        );
        for shell in [Generate::Bash, Generate::Zsh, Generate::Fish] {
            let script = text(shell);
            assert!(script.contains("metrics"), "{shell:?}: {script}");
            assert!(!script.contains("generate"), "{shell:?}: {script}");
        }
    }

    #[test]
    fn completions_name_the_binary() {
        assert!(text(Generate::Bash).contains("complete -F _demo"));
        assert!(text(Generate::Zsh).starts_with("#compdef demo"));
        assert!(text(Generate::Fish).contains("complete -c demo"));
    }
}
