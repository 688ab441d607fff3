//! Results kept while the database has not changed (`db::cache`), against a real PostgreSQL: never
//! a result older than a committed write, stale only while another request reads anew and only
//! as old as allowed. (That an unchanged database is not read again is measured, not asserted:
//! the tests' databases share one server, whose other tests' writes move the snapshot too;
//! `slicemeter-bench scale` prints the cached report's figures.)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use slicemeter::db::cache::SnapshotCache;
use sqlx::PgPool;

use crate::support::*;

async fn setup() -> PgPool {
    let (pool, _) = fresh_pool().await;
    sqlx::query("create table figure (n int8 not null)")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("insert into figure values (1)")
        .execute(&pool)
        .await
        .unwrap();
    pool
}

async fn figure(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select n from figure")
        .fetch_one(pool)
        .await
}

async fn set(pool: &PgPool, n: i64) {
    sqlx::query("update figure set n = $1")
        .bind(n)
        .execute(pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_committed_write_is_seen_by_the_next_read() {
    let pool = setup().await;
    let cache = SnapshotCache::<&str, i64>::new(Duration::from_secs(10), 8);
    assert_eq!(*cache.get(&pool, "k", || figure(&pool)).await.unwrap(), 1);
    set(&pool, 2).await;
    assert_eq!(*cache.get(&pool, "k", || figure(&pool)).await.unwrap(), 2);
    // Another connection, as another replica or the CLI would write.
    let mut other = sqlx::PgConnection::connect_with(&pool.connect_options())
        .await
        .unwrap();
    use sqlx::Connection;
    sqlx::query("update figure set n = 3")
        .execute(&mut other)
        .await
        .unwrap();
    assert_eq!(*cache.get(&pool, "k", || figure(&pool)).await.unwrap(), 3);
}

#[tokio::test]
async fn a_write_committed_after_a_read_began_is_read_again_not_kept_as_new() {
    let pool = setup().await;
    let cache = SnapshotCache::<&str, i64>::new(Duration::from_secs(10), 8);
    // A transaction writes but has not committed while the value is read.
    let mut writer = pool.begin().await.unwrap();
    sqlx::query("update figure set n = 5")
        .execute(&mut *writer)
        .await
        .unwrap();
    assert_eq!(*cache.get(&pool, "k", || figure(&pool)).await.unwrap(), 1);
    writer.commit().await.unwrap();
    assert_eq!(*cache.get(&pool, "k", || figure(&pool)).await.unwrap(), 5);
}

#[tokio::test]
async fn while_one_request_reads_anew_the_others_get_the_last_result_if_young_enough() {
    let pool = setup().await;
    let cache = Arc::new(SnapshotCache::<&str, i64>::new(Duration::from_secs(10), 8));
    assert_eq!(*cache.get(&pool, "k", || figure(&pool)).await.unwrap(), 1);
    set(&pool, 2).await;
    let reads = Arc::new(AtomicUsize::new(0));
    // A slow read of the new value...
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let slow = {
        let (cache, pool, reads) = (cache.clone(), pool.clone(), reads.clone());
        tokio::spawn(async move {
            cache
                .get(&pool, "k", || async {
                    reads.fetch_add(1, Ordering::SeqCst);
                    let _ = released.await;
                    figure(&pool).await
                })
                .await
                .map(|v| *v)
        })
    };
    while reads.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // ...meanwhile another request gets the last result at once, without reading.
    let meanwhile = tokio::time::timeout(
        Duration::from_secs(2),
        cache.get(&pool, "k", || async {
            reads.fetch_add(1, Ordering::SeqCst);
            figure(&pool).await
        }),
    )
    .await
    .expect("answered without waiting for the slow read")
    .unwrap();
    assert_eq!(*meanwhile, 1);
    release.send(()).unwrap();
    assert_eq!(slow.await.unwrap().unwrap(), 2);
    assert_eq!(reads.load(Ordering::SeqCst), 1);
    assert_eq!(*cache.get(&pool, "k", || figure(&pool)).await.unwrap(), 2);
}

#[tokio::test]
async fn a_result_older_than_allowed_is_never_served_the_request_waits_for_the_new_one() {
    let pool = setup().await;
    let cache = Arc::new(SnapshotCache::<&str, i64>::new(Duration::ZERO, 8));
    assert_eq!(*cache.get(&pool, "k", || figure(&pool)).await.unwrap(), 1);
    set(&pool, 2).await;
    let reads = Arc::new(AtomicUsize::new(0));
    let slow = {
        let (cache, pool, reads) = (cache.clone(), pool.clone(), reads.clone());
        tokio::spawn(async move {
            cache
                .get(&pool, "k", || async {
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    figure(&pool).await
                })
                .await
                .map(|v| *v)
        })
    };
    while reads.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let waited = cache
        .get(&pool, "k", || async {
            reads.fetch_add(1, Ordering::SeqCst);
            figure(&pool).await
        })
        .await
        .unwrap();
    assert_eq!(*waited, 2);
    assert_eq!(slow.await.unwrap().unwrap(), 2);
}

#[tokio::test]
async fn a_failed_read_is_not_kept() {
    let pool = setup().await;
    let cache = SnapshotCache::<&str, i64>::new(Duration::from_secs(10), 8);
    let failed = cache
        .get(&pool, "k", || async {
            Err::<i64, _>(sqlx::Error::Protocol("no".into()))
        })
        .await;
    assert!(failed.is_err());
    assert_eq!(*cache.get(&pool, "k", || figure(&pool)).await.unwrap(), 1);
}

/// A revalidating cache (right-sizing's evidence): a result young enough is served at once after
/// a write, one read anew runs behind it and replaces it; past the age, the request reads itself.
#[tokio::test]
async fn a_young_result_is_served_at_once_after_a_write_and_read_anew_behind_the_request() {
    let pool = setup().await;
    let cache = SnapshotCache::<&str, i64>::new(Duration::ZERO, 8)
        .revalidating(Duration::from_millis(1500));
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = |pool: &PgPool, reads: &Arc<AtomicUsize>| {
        let (pool, reads) = (pool.clone(), reads.clone());
        move || async move {
            reads.fetch_add(1, Ordering::SeqCst);
            // Slow enough that a request waiting for it would be seen waiting.
            tokio::time::sleep(Duration::from_millis(300)).await;
            figure(&pool).await
        }
    };
    let first = cache.get_revalidating(&pool, "k", (), counted(&pool, &reads));
    assert_eq!(*first.await.unwrap(), 1);
    assert_eq!(reads.load(Ordering::SeqCst), 1);
    set(&pool, 2).await;
    // The kept 1 at once, not the new figure after a 300 ms read...
    let at_once = tokio::time::timeout(
        Duration::from_millis(200),
        cache.get_revalidating(&pool, "k", (), counted(&pool, &reads)),
    )
    .await
    .expect("served without waiting for a read")
    .unwrap();
    assert_eq!(*at_once, 1);
    // ...and a second request meanwhile starts no second read.
    let again = cache
        .get_revalidating(&pool, "k", (), counted(&pool, &reads))
        .await
        .unwrap();
    assert_eq!(*again, 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        reads.load(Ordering::SeqCst),
        2,
        "one read behind the requests"
    );
    // The read behind them replaces it.
    let mut now = 1;
    for _ in 0..100 {
        now = *cache
            .get_revalidating(&pool, "k", (), counted(&pool, &reads))
            .await
            .unwrap();
        if now == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        now, 2,
        "the read behind the request replaced the kept result"
    );
    // Past the age (other tests' writes may have started reads behind this one's requests too,
    // each 300 ms), a write makes the request read and wait for its own figure.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    set(&pool, 3).await;
    let own = cache
        .get_revalidating(&pool, "k", (), counted(&pool, &reads))
        .await
        .unwrap();
    assert_eq!(*own, 3);
}

/// A request that bounds its wait goes without once the bound is past, and the read it started
/// goes on and is kept: the next request gets it at once.
#[tokio::test]
async fn a_bounded_wait_goes_without_and_the_read_it_started_is_kept() {
    let pool = setup().await;
    let cache =
        SnapshotCache::<&str, i64>::new(Duration::ZERO, 8).revalidating(Duration::from_secs(60));
    let reads = Arc::new(AtomicUsize::new(0));
    let slow = |pool: &PgPool, reads: &Arc<AtomicUsize>| {
        let (pool, reads) = (pool.clone(), reads.clone());
        move || async move {
            reads.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(400)).await;
            figure(&pool).await
        }
    };
    let bound = Duration::from_millis(50);
    let first = cache
        .get_revalidating_within(&pool, "k", (), slow(&pool, &reads), bound)
        .await
        .unwrap();
    assert_eq!(first, None, "past its bound, the request goes without");
    assert_eq!(reads.load(Ordering::SeqCst), 1, "the read started");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let kept = tokio::time::timeout(
        Duration::from_millis(200),
        cache.get_revalidating_within(&pool, "k", (), slow(&pool, &reads), bound),
    )
    .await
    .expect("the kept result at once")
    .unwrap();
    assert_eq!(kept.as_deref(), Some(&1));
    // A bound longer than the read: the request gets it.
    let waited = cache
        .get_revalidating_within(
            &pool,
            "other",
            (),
            slow(&pool, &reads),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(waited.as_deref(), Some(&1));
}

/// A key whose reads take more than the key says (right-sizing's range ends at the current hour,
/// kept by its days): a result asked otherwise is never served as the answer, except at once
/// while young in a revalidating cache, read anew behind the request as asked now.
#[tokio::test]
async fn a_result_asked_otherwise_is_never_new_but_served_at_once_while_young() {
    let pool = setup().await;
    let strict = SnapshotCache::<&str, i64, i64>::new(Duration::from_secs(10), 8);
    assert_eq!(ask(&strict, &pool, 1).await, 101);
    assert_eq!(ask(&strict, &pool, 2).await, 201);

    let cache = SnapshotCache::<&str, i64, i64>::new(Duration::ZERO, 8)
        .revalidating(Duration::from_secs(60));
    assert_eq!(ask(&cache, &pool, 1).await, 101);
    assert_eq!(
        ask(&cache, &pool, 2).await,
        101,
        "the young result, at once"
    );
    let mut now = 101;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        now = ask(&cache, &pool, 2).await;
        if now != 101 {
            break;
        }
    }
    assert_eq!(now, 201, "read anew as asked now");
}

/// Key `k` asked with `n`: what was asked shows in the figure, 100 x `n` + the table's figure.
async fn ask(cache: &SnapshotCache<&'static str, i64, i64>, pool: &PgPool, n: i64) -> i64 {
    let read_pool = pool.clone();
    let read = move || async move { Ok::<i64, sqlx::Error>(100 * n + figure(&read_pool).await?) };
    *cache.get_revalidating(pool, "k", n, read).await.unwrap()
}
