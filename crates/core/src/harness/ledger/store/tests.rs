use super::*;
use std::time::Duration;

const DAY: &str = "2026-12-06";
const T: i64 = 1_796_584_968; // 2026-12-06T19:22:48Z

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "edgecloud-ledger-{name}-{}-{}",
        std::process::id(),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&d);
    d
}

fn one(usd: f64, tokens: u64) -> Spent {
    Spent {
        usd,
        tokens,
        runs: 1,
    }
}

#[test]
fn spending_survives_a_reopen_and_counts_before_it_is_written() {
    let dir = tmpdir("reopen");
    let s = LedgerStore::open(&dir, Duration::from_secs(60)).unwrap();
    s.record_spend("qa", T, one(0.25, 100));
    // Counted at once, before the writer ran.
    assert_eq!(s.spent("qa", DAY).tokens, 100);
    s.record_spend("qa", T, one(0.5, 50));
    s.flush().unwrap();
    drop(s);
    let s = LedgerStore::open(&dir, Duration::from_secs(60)).unwrap();
    let day = s.spent("qa", DAY);
    assert_eq!((day.usd, day.tokens, day.runs), (0.75, 150, 2));
    assert_eq!(s.spent("qa", "2026-12").runs, 2);
    assert_eq!(s.spent("other", DAY), Spent::default());
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_stores_on_one_directory_never_lose_each_others_spending() {
    // Two opens of the directory take the lock like two processes do
    // (the lock belongs to the open file, not the process).
    let dir = tmpdir("shared");
    let a = LedgerStore::open(&dir, Duration::from_secs(60)).unwrap();
    let b = LedgerStore::open(&dir, Duration::from_secs(60)).unwrap();
    std::thread::scope(|s| {
        for store in [&a, &b] {
            s.spawn(move || {
                for _ in 0..200 {
                    store.record_spend("r", T, one(0.01, 1));
                    // Many small writes, interleaved with the other's.
                    store.flush().unwrap();
                }
            });
        }
    });
    drop((a, b));
    let s = LedgerStore::open(&dir, Duration::from_secs(60)).unwrap();
    assert_eq!(s.spent("r", DAY).runs, 400);
    assert_eq!(s.spent("r", DAY).tokens, 400);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_corrupt_or_newer_store_is_an_error_naming_its_file_and_is_left_alone() {
    let dir = tmpdir("corrupt");
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join(SPEND_FILE);
    fs::write(
        &file,
        b"{\"format\":\"edgecloud-ledger\",\"version\":1,\"rou",
    )
    .unwrap();
    let e = LedgerStore::open(&dir, Duration::ZERO).unwrap_err();
    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&file.display().to_string()) && msg.contains("corrupt"),
        "{msg}"
    );
    // Never reset: the bytes are still there.
    assert!(fs::read_to_string(&file).unwrap().ends_with("\"rou"));
    fs::write(
        &file,
        br#"{"format":"edgecloud-ledger","version":7,"routes":{}}"#,
    )
    .unwrap();
    let e = LedgerStore::open(&dir, Duration::ZERO).unwrap_err();
    assert!(
        matches!(e, StoreError::NewerVersion { version: 7, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("version 7"), "{e}");
    fs::write(&file, br#"{"something":"else"}"#).unwrap();
    let e = LedgerStore::open(&dir, Duration::ZERO).unwrap_err();
    assert!(e.to_string().contains("format"), "{e}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_store_locked_past_the_wait_is_an_error_naming_the_lock() {
    let dir = tmpdir("locked");
    fs::create_dir_all(&dir).unwrap();
    let holder = lock_file(&dir).unwrap();
    holder.lock().unwrap();
    let e = LedgerStore::open(&dir, Duration::ZERO).unwrap_err();
    assert!(matches!(e, StoreError::Locked { .. }), "{e}");
    assert!(e.to_string().contains(LOCK_FILE), "{e}");
    holder.unlock().unwrap();
    LedgerStore::open(&dir, Duration::ZERO).unwrap();
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_interrupted_write_leaves_the_old_file_and_its_leftover_is_removed() {
    let dir = tmpdir("torn");
    let s = LedgerStore::open(&dir, Duration::ZERO).unwrap();
    s.record_spend("r", T, one(1.0, 10));
    s.flush().unwrap();
    drop(s);
    // What a SIGKILL between write and rename leaves: a torn temp file.
    let leftover = dir.join(format!(".{SPEND_FILE}.tmp-999-0"));
    fs::write(&leftover, b"{\"format\":\"edgecl").unwrap();
    let s = LedgerStore::open(&dir, Duration::ZERO).unwrap();
    assert!(!leftover.exists());
    assert_eq!(s.spent("r", DAY).tokens, 10);
    fs::remove_dir_all(&dir).unwrap();
}

fn outcome() -> Outcome {
    serde_json::from_value(serde_json::json!({
        "run_id": 7, "request_id": null, "route": "default", "policy": "local-only",
        "status": "ok", "winner": "local", "text": "hi", "completion": null, "error": null,
        "committed": null, "deadline_ms": 1.0, "elapsed_ms": 1.0, "overshoot_ms": 0.0,
        "ttft_ms": null, "decision": {"reason": "x", "decided_by": "policy", "scores": {}},
        "lanes": [], "callbacks": [], "callback_ms": 0.0, "late_workers": 0
    }))
    .unwrap()
}

#[test]
fn records_are_kept_in_their_window_and_evicted_after_it() {
    let dir = tmpdir("records");
    let s = LedgerStore::open(&dir, Duration::from_secs(3600)).unwrap();
    let record = |key: &str, age_ms: i64| Record {
        key: key.into(),
        fingerprint: "f".into(),
        recorded_unix_ms: calendar::now_unix_ms() - age_ms,
        outcome: outcome(),
    };
    s.put_record(record("fresh", 0));
    s.put_record(record("old", 2 * 3600 * 1000));
    assert!(
        s.record("fresh").unwrap().is_some(),
        "visible before it is written"
    );
    s.flush().unwrap();
    drop(s);
    let s = LedgerStore::open(&dir, Duration::from_secs(3600)).unwrap();
    let r = s.record("fresh").unwrap().expect("kept within its window");
    assert_eq!(r.outcome.run_id, 7);
    assert!(s.record("old").unwrap().is_none());
    assert!(!record_path(&dir, "old").exists(), "evicted at open");
    assert!(s.record("never").unwrap().is_none());
    // A damaged record is an error naming it, never a silent miss.
    fs::write(record_path(&dir, "fresh"), b"{").unwrap();
    let e = s.record("fresh").unwrap_err().to_string();
    assert!(e.contains(".json") && e.contains("corrupt"), "{e}");
    fs::remove_dir_all(&dir).unwrap();
}
