//! `configrollout-controller`: rolls out ConfigRollouts across regions. Options are
//! described in `configrollout::app::Options`.

fn main() -> std::process::ExitCode {
    configrollout::app::main()
}
