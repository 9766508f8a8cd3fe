//! The kubectl plugin, built inside the e2e crate so that its tests can run it by path
//! (`CARGO_BIN_EXE_lab-plugin`): the same `configrollout_plugin::main` as
//! `kubectl-configrollout`, under another name so that the two binaries' files never
//! collide in the shared target directory.

fn main() -> std::process::ExitCode {
    configrollout_plugin::main()
}
