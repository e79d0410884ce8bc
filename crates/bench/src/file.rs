//! `--target file`: no server, a raw durable write per call. Each call
//! writes its payload at the next offset of a file that was filled with
//! zeros and synced before measuring, then fdatasyncs it, as a log with
//! preallocated segments does (ZooKeeper's, Stoa's), so the sync flushes
//! data only, never a size or block allocation. One synchronous writer:
//! the latency floor under any acknowledged write on that disk, the lower
//! bound Bagai et al. compare ZooKeeper's writes with.

use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::driver::{self, Backend, Call};
use crate::options::Cell;
use crate::report::CellResult;

/// Bytes written and synced before measuring; calls wrap around in them.
const FILE_BYTES: u64 = 16 << 20;

pub async fn run(dir: &str, cell: &Cell) -> Result<CellResult, String> {
    if cell.sessions * cell.outstanding != 1 || cell.workload.is_ezk() {
        return Err(
            "--target file runs one synchronous writer (--sessions 1 --outstanding 1)".into(),
        );
    }
    let path = Path::new(dir).join(format!("stoa-bench-fsync-{}.bin", std::process::id()));
    let writer = RawWriter::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let result = driver::measure(&[writer], cell, dir).await;
    let _ = std::fs::remove_file(&path);
    result
}

/// One preallocated file and the offset of the next write.
#[derive(Clone)]
struct RawWriter {
    inner: Arc<Mutex<(File, u64)>>,
}

impl RawWriter {
    fn create(path: &Path) -> std::io::Result<RawWriter> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..FILE_BYTES / zeros.len() as u64 {
            file.write_all(&zeros)?;
        }
        file.sync_all()?;
        if let Some(parent) = path.parent() {
            File::open(parent)?.sync_all()?;
        }
        Ok(RawWriter {
            inner: Arc::new(Mutex::new((file, 0))),
        })
    }

    fn write(&self, payload: &[u8]) -> std::io::Result<()> {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (file, at) = &mut *guard;
        let len = payload.len() as u64;
        if *at + len > FILE_BYTES {
            *at = 0;
        }
        file.write_all_at(payload, *at)?;
        file.sync_data()?;
        *at += len;
        Ok(())
    }
}

impl Backend for RawWriter {
    type Error = std::io::Error;

    fn call<'a>(
        &'a self,
        _call: Call<'a>,
        payload: &'a Bytes,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'a {
        // Blocking on purpose: the one writer has nothing else to do, and a
        // hand-off to another thread would add its wake-up to the floor.
        let result = self.write(payload);
        async move { result }
    }

    fn is_terminal(_error: &Self::Error) -> bool {
        true
    }

    fn error_name(error: &Self::Error) -> String {
        format!("io {:?}", error.kind())
    }

    /// The file has no keys.
    fn is_not_found(_error: &Self::Error) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_land_at_successive_offsets_and_wrap_at_the_end() {
        let dir = std::env::temp_dir().join(format!("stoa-bench-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.bin");
        let w = RawWriter::create(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), FILE_BYTES);
        w.write(b"abc").unwrap();
        w.write(b"de").unwrap();
        let mut head = [0u8; 6];
        File::open(&path)
            .unwrap()
            .read_exact_at(&mut head, 0)
            .unwrap();
        assert_eq!(&head, b"abcde\0");
        w.inner.lock().unwrap().1 = FILE_BYTES - 1;
        w.write(b"xy").unwrap();
        assert_eq!(w.inner.lock().unwrap().1, 2);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), FILE_BYTES);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
