//! Holds no code: the benchmarks are `benches/throughput.rs` (`cargo bench -p
//! shardinit-bench`, run by `make bench`).
