//! CSV as a stream of chunks from a writer task: the exports' plumbing. A stream whose writer
//! stops without saying it finished ends in an error, never in a clean end of stream.

use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::mpsc;

/// A chunk of CSV, or the error that cut the stream short.
pub type Chunk = Result<Bytes, std::io::Error>;

const CHUNK: usize = 64 << 10;

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

/// Collects CSV records and hands them on in chunks.
pub(super) struct ChunkWriter {
    pub(super) csv: csv::Writer<Vec<u8>>,
    pub(super) out: mpsc::Sender<Piece>,
}

impl ChunkWriter {
    pub(super) async fn write(&mut self, record: &[String]) -> bool {
        if self.csv.write_record(record).is_err() {
            return false;
        }
        if self.csv.get_ref().len() >= CHUNK {
            return self.flush().await;
        }
        true
    }

    pub(super) async fn flush(&mut self) -> bool {
        let full = std::mem::replace(&mut self.csv, csv::Writer::from_writer(Vec::new()));
        let Ok(buf) = full.into_inner() else {
            return false;
        };
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
        let w = ChunkWriter {
            csv: csv::Writer::from_writer(Vec::new()),
            out: tx,
        };
        tokio::spawn(async move {
            let mut w = w;
            w.write(&["a".to_owned(), "=b".to_owned()]).await;
            w.finish().await;
        });
        assert_eq!(collect(rx).await, vec![Ok(Bytes::from_static(b"a,=b\n"))]);
    }
}
