//! How many threads are worth giving llama.cpp on this machine.

/// The number of physical cores (hyper-threads don't help llama.cpp),
/// never more than the process may use.
///
/// `num_cpus::get_physical` reads the machine's topology on every OS; it
/// ignores the process's CPU affinity and cgroup quota, so the result is
/// capped by `available_parallelism`, which honours both.
pub fn physical_cores() -> usize {
    let allowed = std::thread::available_parallelism().map_or(1, |n| n.get());
    num_cpus::get_physical().min(allowed).max(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn at_least_one_and_never_above_what_the_process_may_use() {
        let n = super::physical_cores();
        assert!(n >= 1);
        assert!(n <= std::thread::available_parallelism().map_or(1, |n| n.get()));
    }
}
