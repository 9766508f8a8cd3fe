//! `kubectl-configrollout`: the kubectl plugin (`kubectl configrollout ...`). Commands are
//! described in the `configrollout_plugin` library.

fn main() -> std::process::ExitCode {
    configrollout_plugin::main()
}
