//! `kubectl-configrollout`: the kubectl plugin (`kubectl configrollout ...`). Commands are
//! described in `configrollout::cli`.

fn main() -> std::process::ExitCode {
    configrollout::cli::main()
}
