//! CSV as a stream of chunks from a writer task: the exports' plumbing. A stream whose writer
//! stops without saying it finished ends in an error, never in a clean end of stream.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A chunk of CSV, or the error that cut the stream short.
pub type Chunk = Result<Bytes, std::io::Error>;

const CHUNK: usize = 64 << 10;

/// Batches of rows made into CSV at once beside the writer task ([`ChunkWriter::write_batch`]):
/// one being handed on while the next is made.
const IN_FLIGHT: usize = 2;

/// What the writer task sends: CSV, and at the very end that it finished. A stream whose writer
/// stops without saying so (an error, a panic) ends in an error, never in a clean end of stream:
/// the client must not take half an export for all of it.
pub(super) enum Piece {
    Csv(Bytes),
    Done,
}

/// The CSV a writer task sends, as a stream that fails unless the writer said it finished.
pub(super) fn checked_stream(
    rx: mpsc::Receiver<Piece>,
) -> impl Stream<Item = Chunk> + Send + 'static {
    // Fused: a body layer (the response compression) may poll once more after the end.
    let stream = futures_util::stream::unfold(Some(rx), |rx| async move {
        let mut rx = rx?;
        match rx.recv().await {
            Some(Piece::Csv(b)) => Some((Ok(b), Some(rx))),
            Some(Piece::Done) => None,
            None => Some((
                Err(std::io::Error::other(
                    "the export stopped part way; see the server log",
                )),
                None,
            )),
        }
    });
    futures_util::StreamExt::fuse(stream)
}

/// Collects CSV records and hands them on in chunks, in the order they were written.
pub(super) struct ChunkWriter {
    csv: csv::Writer<Vec<u8>>,
    out: mpsc::Sender<Piece>,
    /// Batches being made into CSV on the blocking pool, oldest first. While any is, `csv` is
    /// empty: a record written directly waits for them ([`ChunkWriter::write`]).
    batches: VecDeque<JoinHandle<Option<Vec<u8>>>>,
}

impl ChunkWriter {
    pub(super) fn new(out: mpsc::Sender<Piece>) -> Self {
        ChunkWriter {
            csv: csv::Writer::from_writer(Vec::new()),
            out,
            batches: VecDeque::new(),
        }
    }

    pub(super) async fn write(&mut self, record: &[String]) -> bool {
        if !self.drain().await || self.csv.write_record(record).is_err() {
            return false;
        }
        if self.csv.get_ref().len() >= CHUNK {
            return self.flush().await;
        }
        true
    }

    /// Makes `rows` into CSV records (`record` each) on the blocking pool while the caller goes on
    /// to the next rows, and hands them on after what was written before, in order: a month's
    /// rows are made on two cores while the database reads the next, not on the writer's alone
    /// (issue 42). The bytes are those [`ChunkWriter::write`] would have written. A row `record`
    /// makes nothing of ends the export, in an error.
    pub(super) async fn write_batch<T, F>(&mut self, rows: Vec<T>, record: Arc<F>) -> bool
    where
        T: Send + 'static,
        F: Fn(&T) -> Option<Vec<String>> + Send + Sync + 'static,
    {
        // Whatever was written directly goes first (no batch is pending then).
        if !self.flush().await {
            return false;
        }
        self.batches.push_back(tokio::task::spawn_blocking(move || {
            let mut csv = csv::Writer::from_writer(Vec::new());
            for row in &rows {
                csv.write_record(record(row)?).ok()?;
            }
            csv.into_inner().ok()
        }));
        while self.batches.len() > IN_FLIGHT {
            if !self.send_oldest_batch().await {
                return false;
            }
        }
        true
    }

    async fn send_oldest_batch(&mut self) -> bool {
        match self.batches.pop_front() {
            None => true,
            // A batch that failed (or panicked) ends the export, in an error.
            Some(batch) => match batch.await {
                Ok(Some(buf)) => self.send(buf).await,
                _ => false,
            },
        }
    }

    /// Hands on every pending batch.
    async fn drain(&mut self) -> bool {
        while !self.batches.is_empty() {
            if !self.send_oldest_batch().await {
                return false;
            }
        }
        true
    }

    pub(super) async fn flush(&mut self) -> bool {
        if !self.drain().await {
            return false;
        }
        let full = std::mem::replace(&mut self.csv, csv::Writer::from_writer(Vec::new()));
        let Ok(buf) = full.into_inner() else {
            return false;
        };
        self.send(buf).await
    }

    async fn send(&mut self, buf: Vec<u8>) -> bool {
        if buf.is_empty() || self.out.send(Piece::Csv(Bytes::from(buf))).await.is_ok() {
            return true;
        }
        // The client hung up: the export stops, and the statement its rows come from with it.
        crate::db::request_abandoned();
        false
    }

    /// Sends what is left and says the export is whole.
    pub(super) async fn finish(mut self) {
        if self.flush().await {
            let _ = self.out.send(Piece::Done).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    async fn collect(rx: mpsc::Receiver<Piece>) -> Vec<Result<Bytes, String>> {
        checked_stream(rx)
            .map(|c| c.map_err(|e| e.to_string()))
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_writer_that_dies_half_way_ends_the_stream_in_an_error() {
        let (tx, rx) = mpsc::channel(4);
        let writer = tokio::spawn(async move {
            tx.send(Piece::Csv(Bytes::from_static(b"header\n")))
                .await
                .ok();
            panic!("a bug half way through the rows");
        });
        let got = collect(rx).await;
        assert!(writer.await.is_err(), "the writer panicked");
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], Ok(Bytes::from_static(b"header\n")));
        assert_eq!(
            got[1],
            Err("the export stopped part way; see the server log".into())
        );
    }

    #[tokio::test]
    async fn a_writer_that_finishes_ends_the_stream_cleanly() {
        let (tx, rx) = mpsc::channel(4);
        let w = ChunkWriter::new(tx);
        tokio::spawn(async move {
            let mut w = w;
            w.write(&["a".to_owned(), "=b".to_owned()]).await;
            w.finish().await;
        });
        assert_eq!(collect(rx).await, vec![Ok(Bytes::from_static(b"a,=b\n"))]);
    }

    /// Batches made beside the writer come out in the order written, between the records written
    /// directly before and after them, quoted as those are.
    #[tokio::test]
    async fn batches_come_out_in_the_order_they_were_written() {
        let (tx, rx) = mpsc::channel(4);
        let mut w = ChunkWriter::new(tx);
        let record = Arc::new(|n: &u32| Some(vec![n.to_string(), format!("row {n}, quoted")]));
        let writer = tokio::spawn(async move {
            assert!(w.write(&["first".to_owned()]).await);
            for batch in 0..5u32 {
                let rows = (batch * 100..batch * 100 + 100).collect();
                assert!(w.write_batch(rows, record.clone()).await);
            }
            assert!(w.write(&["last".to_owned()]).await);
            w.finish().await;
        });
        let text: String = collect(rx)
            .await
            .into_iter()
            .map(|c| String::from_utf8(c.unwrap().to_vec()).unwrap())
            .collect();
        writer.await.unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 502);
        assert_eq!(lines[0], "first");
        assert_eq!(lines[1], "0,\"row 0, quoted\"");
        assert_eq!(lines[500], "499,\"row 499, quoted\"");
        assert_eq!(lines[501], "last");
        for (i, line) in lines[1..501].iter().enumerate() {
            assert!(line.starts_with(&format!("{i},")), "{i}: {line}");
        }
    }

    /// A batch with a row it makes nothing of, or one that panics, ends the stream in an error,
    /// not in a clean end.
    #[tokio::test]
    async fn a_batch_that_fails_ends_the_stream_in_an_error() {
        for panics in [false, true] {
            let (tx, rx) = mpsc::channel(4);
            let mut w = ChunkWriter::new(tx);
            let record = Arc::new(move |n: &u32| {
                assert!(!(panics && *n == 7), "a bug in a row");
                (*n != 7).then(|| vec![n.to_string()])
            });
            tokio::spawn(async move {
                if w.write_batch((0..10).collect(), record).await {
                    w.finish().await;
                }
            });
            let got = collect(rx).await;
            assert_eq!(
                got,
                vec![Err("the export stopped part way; see the server log".into())],
                "panics: {panics}"
            );
        }
    }
}
