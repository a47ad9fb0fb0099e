//! Contract point 7: synchronous diagnostics through the same admission.

use super::*;

#[test]
fn p7_diagnostics_are_synchronous_and_go_through_admission() {
    let local = Scripted::new("l");
    let h = local_only(&local);
    let held = h.start(req("hold"), RunOptions::new()).unwrap();
    let t = local.next_task();
    assert!(matches!(
        h.local_only(req("q")),
        Err(HarnessError::LaneBusy { lane: Lane::Local })
    ));
    assert!(matches!(
        h.cloud_only(req("q")),
        Err(HarnessError::LaneNotConfigured { lane: Lane::Cloud })
    ));
    t.complete("held");
    held.wait().unwrap();

    let h2 = h.clone();
    let diag = std::thread::spawn(move || h2.local_only(req("q")));
    let mut c = Candidate::new("", FinishReason::Stop);
    c.tokens.local_prompt = Some(3);
    local.next_task().complete_with(c);
    let d = diag.join().unwrap().unwrap();
    assert_eq!(d.backend.name, "l");
    assert_eq!(d.completion.text, "", "a blank answer is still reported");
    assert_eq!(d.report.prompt_tokens, Some(3));
}
