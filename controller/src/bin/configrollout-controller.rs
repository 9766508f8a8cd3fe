fn main() {
    eprintln!("configrollout-controller: not yet implemented");
    std::process::exit(2);
}
