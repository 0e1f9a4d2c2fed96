//! storeval's native engines: the measured-operation kernel's loop, run outside the GIL.
//!
//! The Python side (storeval/workloads/kernel.py) prepares a job before the timed region — buffers,
//! offsets or paths, stamp tags, verify pattern — and calls `run(lo, count, ends, lats, deadline)` for a
//! batch of at most the OpLog's `cap` operations. The batch writes each operation's end time and latency
//! (CLOCK_MONOTONIC ns, the clock of Python's perf_counter_ns) into the OpLog's preallocated arrays and
//! returns `(done, code, value, at)`; Python folds the batch (progress slot, STOP) and turns a failure into
//! the same exception the Python loop raises. Codes: 0 ok, 1 deadline reached, 2 errno `value` at item
//! `at`, 3 short transfer of `value` bytes at `at`, 4 verify: byte `value` of the block at `at` differs.
//!
//! Engines: `psync` (pread/pwrite, one at a time; also each thread of `threads`), `io_uring` (one ring
//! keeping as many operations in flight as the job has buffers), `null` (timing only, no system call).

use std::ffi::CString;
use std::io;
use std::sync::Mutex;

use io_uring::{opcode, types, IoUring};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

const OK: i32 = 0;
const DEADLINE: i32 = 1;
const ERRNO: i32 = 2;
const SHORT: i32 = 3;
const VERIFY: i32 = 4;
const SECTOR: usize = 512;

type Outcome = (usize, i32, i64, usize);

#[inline(always)]
fn now() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn errno() -> i64 {
    io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO) as i64
}

/// Where a batch writes its operations' end times and latencies (the OpLog's arrays).
struct Out {
    ends: *mut i64,
    lats: *mut i64,
}

impl Out {
    #[inline(always)]
    fn put(&self, k: usize, t0: i64, t1: i64) {
        unsafe {
            *self.ends.add(k) = t1;
            *self.lats.add(k) = t1 - t0;
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Engine {
    Psync,
    Uring,
    Null,
}

fn engine_of(name: &str) -> PyResult<Engine> {
    match name {
        "psync" | "threads" => Ok(Engine::Psync),
        "io_uring" => Ok(Engine::Uring),
        "null" => Ok(Engine::Null),
        _ => Err(PyValueError::new_err(format!("unknown native engine {name}"))),
    }
}

fn first_diff(got: &[u8], exp: &[u8]) -> Option<usize> {
    if got == exp {
        None
    } else {
        got.iter().zip(exp).position(|(a, b)| a != b)
    }
}

/// A data job: one open file, its offsets, one buffer per operation in flight.
#[pyclass(frozen)]
struct DataJob {
    engine: Engine,
    fd: i32,
    write: bool,
    bufs: Vec<usize>,
    size: usize,
    offs: usize,
    start: i64,
    step: i64,
    len: usize,
    tags: usize,
    ntags: usize,
    base: usize,
    ring: Mutex<Option<IoUring>>,
}

impl DataJob {
    #[inline(always)]
    fn offset(&self, i: usize) -> i64 {
        if self.offs != 0 {
            unsafe { *(self.offs as *const i64).add(i) }
        } else {
            self.start + self.step * i as i64
        }
    }

    /// Every sector's tag is the writer's tag plus the block's offset (payload.py's stamp, byte for byte).
    #[inline(always)]
    fn stamp(&self, buf: usize, off: i64) {
        if self.write && self.tags != 0 {
            let tags = self.tags as *const u64;
            for k in 0..self.ntags {
                unsafe {
                    let tag = (*tags.add(k)).wrapping_add(off as u64);
                    ((buf + k * SECTOR) as *mut u64).write_unaligned(tag);
                }
            }
        }
    }

    /// The first byte of a read block that is not what its writer wrote (payload.py's Checker).
    fn check(&self, buf: usize, off: i64) -> Option<usize> {
        if self.write || self.base == 0 {
            return None;
        }
        let got = unsafe { std::slice::from_raw_parts(buf as *const u8, self.size) };
        let base = unsafe { std::slice::from_raw_parts(self.base as *const u8, self.size) };
        let tags = self.tags as *const u64;
        let mut prev = 0;
        for k in 0..self.ntags {
            let pos = k * SECTOR;
            if let Some(d) = first_diff(&got[prev..pos], &base[prev..pos]) {
                return Some(prev + d);
            }
            let tag = unsafe { *tags.add(k) }.wrapping_add(off as u64).to_ne_bytes();
            if let Some(d) = first_diff(&got[pos..pos + 8], &tag) {
                return Some(pos + d);
            }
            prev = pos + 8;
        }
        first_diff(&got[prev..], &base[prev..]).map(|d| prev + d)
    }

    #[inline(always)]
    fn transfer(&self, buf: usize, off: i64) -> isize {
        loop {
            let n = unsafe {
                if self.write {
                    libc::pwrite(self.fd, buf as *const libc::c_void, self.size, off)
                } else {
                    libc::pread(self.fd, buf as *mut libc::c_void, self.size, off)
                }
            };
            if n >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return n;
            }
        }
    }

    /// One operation at a time (psync), or none at all (null: the transfer succeeds at once).
    fn run_sync(&self, lo: usize, count: usize, out: &Out, deadline: i64) -> Outcome {
        let buf = self.bufs[0];
        let size = self.size as isize;
        let null = self.engine == Engine::Null;
        for k in 0..count {
            let i = lo + k;
            let off = self.offset(i);
            self.stamp(buf, off);
            let t0 = now();
            // null: the offset is still read (black_box), as fio's null engine still makes each one
            let n = if null { std::hint::black_box(off); size } else { self.transfer(buf, off) };
            let t1 = now();
            if n < 0 {
                return (k, ERRNO, errno(), i);
            }
            if n != size {
                return (k, SHORT, n as i64, i);
            }
            if let Some(bad) = self.check(buf, off) {
                return (k, VERIFY, bad as i64, i);
            }
            out.put(k, t0, t1);
            if t1 >= deadline {
                return (k + 1, DEADLINE, 0, 0);
            }
        }
        (count, OK, 0, 0)
    }

    /// As many operations in flight as there are buffers, on one io_uring; the batch drains before it returns.
    /// Each operation is submitted as soon as it is prepared (one `io_uring_enter` each, as fio does with its
    /// default `iodepth_batch_submit=1`): where the kernel hands reads to its io-wq workers (buffered tmpfs),
    /// a worker starts on the first while the rest are prepared — measured on /dev/shm at QD32, 594 k vs
    /// 513 k IOPS for one submit per wake (medians of 5, fio 572 k).
    fn run_uring(&self, ring: &mut IoUring, lo: usize, count: usize, out: &Out, deadline: i64) -> Outcome {
        let depth = self.bufs.len();
        let mut free: Vec<usize> = (0..depth).rev().collect();
        let mut t0 = vec![0i64; depth];
        let mut item = vec![0usize; depth];
        let mut reaped: Vec<(usize, i32)> = Vec::with_capacity(depth); // completions of one wake, reused
        let (mut next, mut done, mut inflight) = (0usize, 0usize, 0usize);
        let mut outcome: Option<(i32, i64, usize)> = None;
        loop {
            if outcome.is_none() {
                while next < count && !free.is_empty() {
                    let slot = free.pop().unwrap();
                    let i = lo + next;
                    let off = self.offset(i);
                    let buf = self.bufs[slot];
                    self.stamp(buf, off);
                    let sqe = if self.write {
                        opcode::Write::new(types::Fd(self.fd), buf as *const u8, self.size as u32)
                            .offset(off as u64)
                            .build()
                    } else {
                        opcode::Read::new(types::Fd(self.fd), buf as *mut u8, self.size as u32)
                            .offset(off as u64)
                            .build()
                    };
                    unsafe {
                        ring.submission().push(&sqe.user_data(slot as u64)).expect("ring sized to the queue depth");
                    }
                    item[slot] = i;
                    t0[slot] = now();
                    // a failed submit leaves the entry queued: submit_and_wait below submits it or says why
                    let _ = ring.submit();
                    next += 1;
                    inflight += 1;
                }
            }
            if inflight == 0 {
                break;
            }
            let spin_until = now() + SPIN_NS;
            while ring.completion().is_empty() && !ring.submission().taskrun() && now() < spin_until {
                std::hint::spin_loop();
            }
            loop {
                match ring.submit_and_wait(1) {
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) || e.raw_os_error() == Some(libc::EBUSY) => {}
                    Err(e) => {
                        // the ring itself failed: nothing more completes, report it on the oldest operation
                        let at = item[(0..depth).find(|s| !free.contains(s)).unwrap_or(0)];
                        return (done, ERRNO, e.raw_os_error().unwrap_or(libc::EIO) as i64, at);
                    }
                }
            }
            let t1 = now();
            reaped.clear();
            reaped.extend(ring.completion().map(|cqe| (cqe.user_data() as usize, cqe.result())));
            for &(slot, res) in reaped.iter() {
                inflight -= 1;
                free.push(slot);
                if matches!(outcome, Some((code, _, _)) if code != DEADLINE) {
                    continue; // draining after a failure: what completes now is not counted
                }
                let i = item[slot];
                if res < 0 {
                    outcome = Some((ERRNO, -res as i64, i));
                } else if res as usize != self.size {
                    outcome = Some((SHORT, res as i64, i));
                } else if let Some(bad) = self.check(self.bufs[slot], self.offset(i)) {
                    outcome = Some((VERIFY, bad as i64, i));
                } else {
                    out.put(done, t0[slot], t1); // after the deadline too: what was in flight completes and counts
                    done += 1;
                    if t1 >= deadline && outcome.is_none() {
                        outcome = Some((DEADLINE, 0, 0));
                    }
                }
            }
        }
        match outcome {
            None => (done, OK, 0, 0),
            Some((code, value, at)) => (done, code, value, at),
        }
    }
}

#[pymethods]
impl DataJob {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(engine: &str, fd: i32, write: bool, bufs: Vec<usize>, size: usize, offs: usize, start: i64, step: i64,
           len: usize, tags: usize, ntags: usize, base: usize) -> PyResult<Self> {
        let engine = engine_of(engine)?;
        if bufs.is_empty() || bufs.contains(&0) && size > 0 {
            return Err(PyValueError::new_err("a data job needs a buffer per operation in flight"));
        }
        if ntags > 0 && (ntags - 1) * SECTOR + 8 > size {
            return Err(PyValueError::new_err("stamp tags do not fit the transfer size"));
        }
        let ring = if engine == Engine::Uring {
            let entries = bufs.len().next_power_of_two().max(2) as u32;
            Some(new_ring(entries).map_err(|e| PyValueError::new_err(format!("io_uring: {e}")))?)
        } else {
            None
        };
        Ok(DataJob { engine, fd, write, bufs, size, offs, start, step, len, tags, ntags, base, ring: Mutex::new(ring) })
    }

    /// Operations `lo` … `lo+count` of the job, timed into `ends`/`lats` from index 0.
    fn run(&self, py: Python<'_>, lo: usize, count: usize, ends: usize, lats: usize, deadline: i64) -> PyResult<Outcome> {
        if lo + count > self.len {
            return Err(PyValueError::new_err("batch past the job's offsets"));
        }
        let (ends, lats) = (ends, lats);
        Ok(py.allow_threads(|| {
            let out = Out { ends: ends as *mut i64, lats: lats as *mut i64 };
            if self.engine == Engine::Uring {
                let mut guard = self.ring.lock().unwrap();
                let ring = guard.as_mut().unwrap();
                self.run_uring(ring, lo, count, &out, deadline)
            } else {
                self.run_sync(lo, count, &out, deadline)
            }
        }))
    }
}

#[derive(Clone, Copy, PartialEq)]
enum MetaOp {
    Mkdir,
    Rmdir,
    Stat,
    Create,
    Read,
    Unlink,
}

/// A metadata job: one operation over a list of local paths.
#[pyclass(frozen)]
struct MetaJob {
    null: bool,
    op: MetaOp,
    paths: Vec<CString>,
    data: usize,
    data_len: usize,
    buf: usize,
    buf_len: usize,
    expect: i64,
}

impl MetaJob {
    fn call(&self, path: &CString) -> Result<i64, i64> {
        let p = path.as_ptr();
        if self.null {
            return Ok(self.expect.max(0));
        }
        unsafe {
            match self.op {
                MetaOp::Mkdir => check(libc::mkdir(p, 0o777) as isize).map(|_| 0),
                MetaOp::Rmdir => check(libc::rmdir(p) as isize).map(|_| 0),
                MetaOp::Unlink => check(libc::unlink(p) as isize).map(|_| 0),
                MetaOp::Stat => {
                    let mut st: libc::stat = std::mem::zeroed();
                    check(libc::stat(p, &mut st) as isize).map(|_| 0)
                }
                MetaOp::Create => {
                    let fd = check(libc::open(p, libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC, 0o644) as isize)?;
                    let mut r = Ok(0);
                    if self.data_len > 0 {
                        r = check(libc::write(fd as i32, self.data as *const libc::c_void, self.data_len)).map(|_| 0);
                    }
                    let c = check(libc::close(fd as i32) as isize);
                    r.and(c.map(|_| 0))
                }
                MetaOp::Read => {
                    let fd = check(libc::open(p, libc::O_RDONLY | libc::O_CLOEXEC) as isize)? as i32;
                    if self.buf_len == 0 {
                        // an empty file's read is its open and close, as mdtest's (-e 0 reads nothing)
                        return check(libc::close(fd) as isize).map(|_| 0);
                    }
                    let mut total = 0usize;
                    let r = loop {
                        let n = libc::read(fd, (self.buf + total) as *mut libc::c_void, self.buf_len - total);
                        if n < 0 {
                            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                                continue;
                            }
                            break Err(errno());
                        }
                        total += n as usize;
                        if n == 0 || total >= self.buf_len {
                            break Ok(total as i64);
                        }
                    };
                    let c = check(libc::close(fd) as isize);
                    r.and_then(|n| c.map(|_| n))
                }
            }
        }
    }
}

fn check(r: isize) -> Result<isize, i64> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

#[pymethods]
impl MetaJob {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(engine: &str, op: &str, paths: Vec<Bound<'_, PyBytes>>, data: usize, data_len: usize, buf: usize,
           buf_len: usize, expect: i64) -> PyResult<Self> {
        let null = match engine_of(engine)? {
            Engine::Null => true,
            Engine::Psync => false,
            Engine::Uring => return Err(PyValueError::new_err("metadata runs one system call at a time (psync)")),
        };
        let op = match op {
            "mkdir" => MetaOp::Mkdir,
            "rmdir" => MetaOp::Rmdir,
            "stat" => MetaOp::Stat,
            "create" => MetaOp::Create,
            "read" => MetaOp::Read,
            "unlink" => MetaOp::Unlink,
            _ => return Err(PyValueError::new_err(format!("unknown metadata operation {op}"))),
        };
        let paths = paths
            .iter()
            .map(|p| CString::new(p.as_bytes()).map_err(|_| PyValueError::new_err("a path holds a NUL byte")))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(MetaJob { null, op, paths, data, data_len, buf, buf_len, expect })
    }

    fn run(&self, py: Python<'_>, lo: usize, count: usize, ends: usize, lats: usize, deadline: i64) -> PyResult<Outcome> {
        if lo + count > self.paths.len() {
            return Err(PyValueError::new_err("batch past the job's paths"));
        }
        Ok(py.allow_threads(|| {
            let out = Out { ends: ends as *mut i64, lats: lats as *mut i64 };
            for k in 0..count {
                let i = lo + k;
                let t0 = now();
                let r = self.call(&self.paths[i]);
                let t1 = now();
                match r {
                    Err(e) => return (k, ERRNO, e, i),
                    Ok(n) if self.expect >= 0 && n != self.expect => return (k, SHORT, n, i),
                    Ok(_) => {}
                }
                out.put(k, t0, t1);
                if t1 >= deadline {
                    return (k + 1, DEADLINE, 0, 0);
                }
            }
            (count, OK, 0, 0)
        }))
    }
}

/// A ring whose completions are run by the submitting thread when it asks for them (as fio sets it up):
/// no interrupt of the loop per completion. Older kernels refuse those flags: then a plain ring.
/// How long a wake for completions spins (on the completion queue and the kernel's "task work pending" flag)
/// before it sleeps in `io_uring_enter`: a completion that arrives within it costs no sleep and wake-up (on a
/// virtual machine, a halt and an interrupt each). Measured on /dev/shm at QD32 (medians of 5, fio 605 k):
/// no spin 577 k IOPS, 3 µs 624 k, 10 µs 652 k, 20 µs 520 k, 50 µs 269 k — a longer spin takes the CPU the
/// kernel's worker needs.
const SPIN_NS: i64 = 10_000;

fn new_ring(entries: u32) -> io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| IoUring::builder().setup_coop_taskrun().build(entries))
        .or_else(|_| IoUring::new(entries))
}

/// Whether this process may use io_uring with the read and write operations (a kernel without it, or seccomp
/// or kernel.io_uring_disabled forbidding it, says no).
#[pyfunction]
fn io_uring_available() -> bool {
    let Ok(mut ring) = IoUring::new(2) else { return false };
    let mut probe = io_uring::Probe::new();
    if ring.submitter().register_probe(&mut probe).is_err()
        || !probe.is_supported(opcode::Read::CODE)
        || !probe.is_supported(opcode::Write::CODE)
    {
        return false;
    }
    let nop = opcode::Nop::new().build().user_data(7);
    if unsafe { ring.submission().push(&nop) }.is_err() || ring.submit_and_wait(1).is_err() {
        return false;
    }
    let ok = ring.completion().next().map(|c| c.result() >= 0).unwrap_or(false);
    ok
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DataJob>()?;
    m.add_class::<MetaJob>()?;
    m.add_function(wrap_pyfunction!(io_uring_available, m)?)?;
    m.add("OK", OK)?;
    m.add("DEADLINE", DEADLINE)?;
    m.add("ERRNO", ERRNO)?;
    m.add("SHORT", SHORT)?;
    m.add("VERIFY", VERIFY)?;
    m.add("SPIN_NS", SPIN_NS)?;
    Ok(())
}

/// The loops' own checks, outside Python: counts, offsets, stamps, timings and each failure code.
/// `cargo test --manifest-path native/Cargo.toml --no-default-features` (tests/test_native_crate.py runs it).
#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::AsRawFd;

    const BS: usize = 4096;

    /// A file of its own under the temporary directory, removed when dropped.
    struct TempFile {
        path: std::path::PathBuf,
        file: std::fs::File,
    }

    impl TempFile {
        fn new(tag: &str) -> TempFile {
            let path = std::env::temp_dir().join(format!("storeval-native-test-{}-{tag}", std::process::id()));
            let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
            TempFile { path, file }
        }
        fn fd(&self) -> i32 {
            self.file.as_raw_fd()
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Page-aligned buffers that live as long as the test (the jobs hold raw addresses).
    struct Bufs(Vec<Vec<u8>>);

    impl Bufs {
        fn new(n: usize, size: usize, fill: u8) -> Bufs {
            Bufs((0..n).map(|_| vec![fill; size]).collect())
        }
        fn addrs(&self) -> Vec<usize> {
            self.0.iter().map(|b| b.as_ptr() as usize).collect()
        }
    }

    fn data_job(engine: Engine, fd: i32, write: bool, bufs: &Bufs, offs: Option<&[i64]>, start: i64, step: i64,
                len: usize, tags: Option<&[u64]>, base: Option<&[u8]>) -> DataJob {
        let ring = if engine == Engine::Uring { Some(new_ring(bufs.0.len().next_power_of_two().max(2) as u32).unwrap()) } else { None };
        DataJob {
            engine,
            fd,
            write,
            bufs: bufs.addrs(),
            size: bufs.0[0].len(),
            offs: offs.map_or(0, |o| o.as_ptr() as usize),
            start,
            step,
            len,
            tags: tags.map_or(0, |t| t.as_ptr() as usize),
            ntags: tags.map_or(0, |t| t.len()),
            base: base.map_or(0, |b| b.as_ptr() as usize),
            ring: Mutex::new(ring),
        }
    }

    fn run(job: &DataJob, lo: usize, count: usize, ends: &mut [i64], lats: &mut [i64], deadline: i64) -> Outcome {
        let out = Out { ends: ends.as_mut_ptr(), lats: lats.as_mut_ptr() };
        if job.engine == Engine::Uring {
            let mut guard = job.ring.lock().unwrap();
            job.run_uring(guard.as_mut().unwrap(), lo, count, &out, deadline)
        } else {
            job.run_sync(lo, count, &out, deadline)
        }
    }

    /// io_uring is required unless a person said this host lacks it (STOREVAL_TEST_WITHOUT_IO_URING=1, as for
    /// the Python tests): a test that quietly skipped it would pass without testing the engine.
    fn uring_here() -> bool {
        let waived = matches!(std::env::var("STOREVAL_TEST_WITHOUT_IO_URING").as_deref(), Ok("1") | Ok("true") | Ok("yes"));
        let offered = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .map(|s| s.trim() == "0")
            .unwrap_or(true);
        if !waived {
            assert!(offered, "io_uring is disabled (kernel.io_uring_disabled is not 0); set STOREVAL_TEST_WITHOUT_IO_URING=1 to test without it");
            assert!(io_uring_available(), "the kernel offers io_uring but a ring cannot be used here");
        }
        offered && io_uring_available()
    }

    /// Sequential writes then verified reads through one engine: every block where its offset says, every
    /// sector stamped with the writer's tag plus the block's offset, one end time and latency per operation.
    fn write_then_read(engine: Engine, depth: usize) {
        let f = TempFile::new(&format!("seq-{engine:?}-{depth}")); // unique per test: cargo runs the tests at once in one process
        let n = 16usize;
        let base: Vec<u8> = (0..BS).map(|i| (i * 7 + 3) as u8).collect();
        let tags: Vec<u64> = (0..BS / SECTOR).map(|k| 0x5100_0000_0000_0000u64 + k as u64).collect();
        let wbufs = Bufs::new(depth, BS, 0);
        for b in &wbufs.0 {
            unsafe { std::ptr::copy_nonoverlapping(base.as_ptr(), b.as_ptr() as *mut u8, BS) };
        }
        let w = data_job(engine, f.fd(), true, &wbufs, None, 0, BS as i64, n, Some(&tags), None);
        let (mut ends, mut lats) = (vec![0i64; n], vec![0i64; n]);
        let t = now();
        assert_eq!(run(&w, 0, n, &mut ends, &mut lats, i64::MAX), (n, OK, 0, 0));
        assert!(ends.iter().all(|&e| e >= t) && lats.iter().all(|&l| l >= 0));
        let on_disk = std::fs::read(&f.path).unwrap();
        assert_eq!(on_disk.len(), n * BS);
        for blk in 0..n {
            let block = &on_disk[blk * BS..(blk + 1) * BS];
            for k in 0..BS / SECTOR {
                let tag = u64::from_ne_bytes(block[k * SECTOR..k * SECTOR + 8].try_into().unwrap());
                assert_eq!(tag, tags[k] + (blk * BS) as u64, "block {blk} sector {k}");
                assert_eq!(&block[k * SECTOR + 8..(k + 1) * SECTOR], &base[k * SECTOR + 8..(k + 1) * SECTOR]);
            }
        }
        // read back in reverse order through explicit offsets, verifying each block
        let offs: Vec<i64> = (0..n).rev().map(|i| (i * BS) as i64).collect();
        let rbufs = Bufs::new(depth, BS, 0xee);
        let r = data_job(engine, f.fd(), false, &rbufs, Some(&offs), 0, 0, n, Some(&tags), Some(&base));
        assert_eq!(run(&r, 0, n, &mut ends, &mut lats, i64::MAX), (n, OK, 0, 0));
        // a batch in the middle of the job: items lo..lo+count
        assert_eq!(run(&r, 4, 5, &mut ends, &mut lats, i64::MAX), (5, OK, 0, 0));
        // one flipped byte in block 3 (file offset 3*BS + 700): the read of item n-1-3 finds it at byte 700
        let mut bad = on_disk.clone();
        bad[3 * BS + 700] ^= 0xff;
        std::fs::write(&f.path, &bad).unwrap();
        assert_eq!(run(&r, 0, n, &mut ends, &mut lats, i64::MAX).1, VERIFY);
        let got = run(&r, 0, n, &mut ends, &mut lats, i64::MAX);
        assert_eq!((got.1, got.2, got.3), (VERIFY, 700, n - 1 - 3));
        // a stamp byte (the first 8 of a sector) is checked too
        let mut bad = on_disk.clone();
        bad[5 * BS + 2 * SECTOR + 1] ^= 1;
        std::fs::write(&f.path, &bad).unwrap();
        let got = run(&r, 0, n, &mut ends, &mut lats, i64::MAX);
        assert_eq!((got.1, got.2, got.3), (VERIFY, (2 * SECTOR + 1) as i64, n - 1 - 5));
    }

    #[test]
    fn psync_writes_and_verifies_every_block() {
        write_then_read(Engine::Psync, 1);
    }

    #[test]
    fn io_uring_writes_and_verifies_every_block_at_depth() {
        if uring_here() {
            write_then_read(Engine::Uring, 1);
            write_then_read(Engine::Uring, 4);
        }
    }

    #[test]
    fn strided_offsets_start_and_step() {
        let f = TempFile::new("stride");
        let bufs = Bufs::new(1, BS, 0xab);
        // items 0..4 at start 3*BS, step 2*BS: blocks 3, 5, 7, 9; holes read back as zeros
        let w = data_job(Engine::Psync, f.fd(), true, &bufs, None, 3 * BS as i64, 2 * BS as i64, 4, None, None);
        let (mut ends, mut lats) = (vec![0i64; 4], vec![0i64; 4]);
        assert_eq!(run(&w, 0, 4, &mut ends, &mut lats, i64::MAX), (4, OK, 0, 0));
        let data = std::fs::read(&f.path).unwrap();
        assert_eq!(data.len(), 10 * BS);
        for blk in 0..10 {
            let want = if [3, 5, 7, 9].contains(&blk) { 0xab } else { 0 };
            assert!(data[blk * BS..(blk + 1) * BS].iter().all(|&b| b == want), "block {blk}");
        }
    }

    #[test]
    fn errno_short_and_deadline() {
        let f = TempFile::new("errs");
        std::fs::write(&f.path, vec![1u8; BS + 100]).unwrap();
        let bufs = Bufs::new(1, BS, 0);
        let (mut ends, mut lats) = (vec![0i64; 8], vec![0i64; 8]);
        // block 1 holds only 100 bytes: item 1 is a short read of 100
        let r = data_job(Engine::Psync, f.fd(), false, &bufs, None, 0, BS as i64, 3, None, None);
        assert_eq!(run(&r, 0, 3, &mut ends, &mut lats, i64::MAX), (1, SHORT, 100, 1));
        // a read-only descriptor refuses writes: EBADF at item 0
        let ro = std::fs::File::open(&f.path).unwrap();
        let w = data_job(Engine::Psync, ro.as_raw_fd(), true, &bufs, None, 0, BS as i64, 2, None, None);
        assert_eq!(run(&w, 0, 2, &mut ends, &mut lats, i64::MAX), (0, ERRNO, libc::EBADF as i64, 0));
        // a deadline already past: the first operation completes, counts and ends the batch
        let r = data_job(Engine::Psync, f.fd(), false, &bufs, None, 0, 0, 8, None, None);
        assert_eq!(run(&r, 0, 8, &mut ends, &mut lats, 0), (1, DEADLINE, 0, 0));
        if uring_here() {
            let rb = Bufs::new(2, BS, 0);
            let u = data_job(Engine::Uring, f.fd(), false, &rb, None, 0, BS as i64, 3, None, None);
            let got = run(&u, 0, 3, &mut ends, &mut lats, i64::MAX);
            assert_eq!((got.1, got.2, got.3), (SHORT, 100, 1));
            let u = data_job(Engine::Uring, ro.as_raw_fd(), true, &rb, None, 0, BS as i64, 2, None, None);
            let got = run(&u, 0, 2, &mut ends, &mut lats, i64::MAX);
            assert_eq!((got.0, got.1, got.2), (0, ERRNO, libc::EBADF as i64));
        }
    }

    #[test]
    fn null_engine_makes_no_system_call_and_times_every_operation() {
        // fd -1: any real transfer would fail with EBADF
        let bufs = Bufs::new(1, BS, 0);
        let n = 1000;
        let j = data_job(Engine::Null, -1, false, &bufs, None, 0, BS as i64, n, None, None);
        let (mut ends, mut lats) = (vec![-1i64; n], vec![-1i64; n]);
        let t = now();
        assert_eq!(run(&j, 0, n, &mut ends, &mut lats, i64::MAX), (n, OK, 0, 0));
        assert!(ends.windows(2).all(|w| w[0] <= w[1]) && ends[0] >= t);
        assert!(lats.iter().all(|&l| (0..1_000_000).contains(&l)));
    }

    fn meta(op: MetaOp, paths: &[std::path::PathBuf], data: &[u8], buf: &mut [u8], expect: i64) -> MetaJob {
        MetaJob {
            null: false,
            op,
            paths: paths.iter().map(|p| CString::new(p.to_str().unwrap()).unwrap()).collect(),
            data: data.as_ptr() as usize,
            data_len: data.len(),
            buf: buf.as_mut_ptr() as usize,
            buf_len: buf.len(),
            expect,
        }
    }

    fn run_meta(job: &MetaJob, n: usize) -> Outcome {
        let (mut ends, mut lats) = (vec![0i64; n], vec![0i64; n]);
        let out = Out { ends: ends.as_mut_ptr(), lats: lats.as_mut_ptr() };
        let mut r = (0, OK, 0, 0);
        for k in 0..n {
            let t0 = now();
            match job.call(&job.paths[k]) {
                Err(e) => return (k, ERRNO, e, k),
                Ok(got) if job.expect >= 0 && got != job.expect => return (k, SHORT, got, k),
                Ok(_) => out.put(k, t0, now()),
            }
            r = (k + 1, OK, 0, 0);
        }
        r
    }

    #[test]
    fn metadata_operations_count_and_fail_where_they_should() {
        let dir = std::env::temp_dir().join(format!("storeval-native-meta-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let dirs: Vec<_> = (0..3).map(|i| dir.join(format!("d.{i}"))).collect();
        let files: Vec<_> = (0..5).map(|i| dir.join(format!("f.{i}"))).collect();
        let data = vec![9u8; 3901];
        let mut buf = vec![0u8; 3901];
        assert_eq!(run_meta(&meta(MetaOp::Mkdir, &dirs, &[], &mut buf, -1), 3), (3, OK, 0, 0));
        assert!(dirs.iter().all(|d| d.is_dir()));
        assert_eq!(run_meta(&meta(MetaOp::Create, &files, &data, &mut buf, -1), 5), (5, OK, 0, 0));
        assert!(files.iter().all(|f| std::fs::read(f).unwrap() == data));
        assert_eq!(run_meta(&meta(MetaOp::Stat, &files, &[], &mut buf, -1), 5), (5, OK, 0, 0));
        assert_eq!(run_meta(&meta(MetaOp::Read, &files, &[], &mut buf, 3901), 5), (5, OK, 0, 0));
        assert!(buf.iter().all(|&b| b == 9));
        // a read that expects more bytes than the file holds is short, with the count it got
        let mut big = vec![0u8; 5000];
        assert_eq!(run_meta(&meta(MetaOp::Read, &files, &[], &mut big, 5000), 5), (0, SHORT, 3901, 0));
        assert_eq!(run_meta(&meta(MetaOp::Unlink, &files, &[], &mut buf, -1), 5), (5, OK, 0, 0));
        assert!(files.iter().all(|f| !f.exists()));
        // stat of a removed file: ENOENT at item 0; rmdir of the directories works once, then ENOENT
        assert_eq!(run_meta(&meta(MetaOp::Stat, &files, &[], &mut buf, -1), 5), (0, ERRNO, libc::ENOENT as i64, 0));
        assert_eq!(run_meta(&meta(MetaOp::Rmdir, &dirs, &[], &mut buf, -1), 3), (3, OK, 0, 0));
        assert_eq!(run_meta(&meta(MetaOp::Rmdir, &dirs, &[], &mut buf, -1), 3), (0, ERRNO, libc::ENOENT as i64, 0));
        std::fs::remove_dir(&dir).unwrap();
    }
}
