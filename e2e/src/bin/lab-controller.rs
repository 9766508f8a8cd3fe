//! The controller, built inside the e2e crate so that its tests can start it by path
//! (`CARGO_BIN_EXE_lab-controller`): the same `configrollout::app::main` as
//! `configrollout-controller`.

fn main() -> std::process::ExitCode {
    configrollout::app::main()
}
