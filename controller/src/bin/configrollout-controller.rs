//! `configrollout-controller`: rolls out ConfigRollouts across regions. Options are
//! described in `configrollout::app::Options`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let options = match configrollout::app::Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(error) => {
            eprintln!("configrollout-controller: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("configrollout-controller: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(configrollout::app::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("configrollout-controller: {error}");
            ExitCode::FAILURE
        }
    }
}
