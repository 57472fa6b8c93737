//! Generation speed of the 16-bit fills (`cargo run --release -p shardinit-bench --example
//! generation`): bfloat16 and float16 normal and uniform values, flat fills of 2^26
//! elements on the calling thread, in elements and bytes of output per second of the
//! thread's CPU time (Linux: /proc/thread-self/schedstat), so that a loaded machine
//! measures the same; the best of five. Compare builds back to back in the same run.

use half::{bf16, f16};
use shardinit_core::{Init, OutBuf, ParamStream, Region, Threads};

const ELEMENTS: usize = 1 << 26;
const ROUNDS: usize = 5;

/// CPU time of the calling thread, in seconds.
fn thread_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux schedstat");
    let nanoseconds: f64 = stat.split_whitespace().next().unwrap().parse().unwrap();
    nanoseconds * 1e-9
}

fn time_fill(init: Init, out: OutBuf<'_>, threads: Threads) -> f64 {
    let param = ParamStream {
        key64: 0x47a9_4443_d83c_cf19,
        global_shape: vec![ELEMENTS as u64],
        init,
    };
    let mut out = out;
    let mut best = f64::INFINITY;
    for _ in 0..ROUNDS {
        let started = thread_cpu_seconds();
        let reborrowed = match &mut out {
            OutBuf::BF16(s) => OutBuf::BF16(s),
            OutBuf::F16(s) => OutBuf::F16(s),
            OutBuf::F32(s) => OutBuf::F32(s),
            OutBuf::F64(s) => OutBuf::F64(s),
            _ => unreachable!(),
        };
        param
            .fill_region(&Region::Flat { start: 0 }, reborrowed, threads)
            .unwrap();
        best = best.min(thread_cpu_seconds() - started);
    }
    best
}

fn main() {
    let mut words = vec![0u32; ELEMENTS];
    let mut best = f64::INFINITY;
    for _ in 0..ROUNDS {
        let started = thread_cpu_seconds();
        shardinit_core::Stream::new(1).fill_words(0, &mut words);
        best = best.min(thread_cpu_seconds() - started);
    }
    println!("raw words: {:7.1} M words/s", ELEMENTS as f64 / best / 1e6);
    let mut bf16s = vec![bf16::ZERO; ELEMENTS];
    let mut f16s = vec![f16::ZERO; ELEMENTS];
    let normal = Init::Normal {
        mean: 0.0,
        std: 0.02,
    };
    let uniform = Init::Uniform { a: -0.1, b: 0.1 };
    for (threads_name, threads) in [("1 thread", Threads::Count(1))] {
        for (name, init) in [("normal", normal), ("uniform", uniform)] {
            for dtype in ["bfloat16", "float16"] {
                let out = match dtype {
                    "bfloat16" => OutBuf::BF16(&mut bf16s),
                    _ => OutBuf::F16(&mut f16s),
                };
                let seconds = time_fill(init, out, threads);
                println!(
                    "{name:8} {dtype:9} {threads_name:8}: {:7.1} M elements/s, {:5.2} GB/s",
                    ELEMENTS as f64 / seconds / 1e6,
                    2.0 * ELEMENTS as f64 / seconds / 1e9
                );
            }
        }
    }
}
