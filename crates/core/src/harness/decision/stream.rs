//! What reaches a streaming caller: a lane's tokens are buffered until
//! the run commits to a lane (at that lane's first token where the policy
//! and commit mode allow it, else at the decision), then the committed
//! lane's text goes out and nothing else ever does. Once committed, the
//! other lane is cancelled and no escalation follows. It must not decide
//! the winner; it only carries out a commit and the winner's flush.

use super::lanes::Phase;
use super::{Core, Effect};
use crate::harness::observer::Event;
use crate::harness::policy::CommitMode;
use crate::lane::Lane;
use crate::reasoning::Piece;
use std::time::Instant;

/// The streaming side of a run.
#[derive(Default)]
pub(super) struct Stream {
    /// The lane whose text the caller receives.
    pub(super) committed: Option<Lane>,
    /// Bytes of answer handed to the caller so far.
    pub(super) forwarded_bytes: usize,
    /// Bytes of thinking handed to the caller so far.
    pub(super) forwarded_reasoning_bytes: usize,
    /// When the caller got its first piece.
    pub(super) caller_first_token: Option<Instant>,
}

impl Core {
    pub(super) fn on_token(
        &mut self,
        lane: Lane,
        piece: Piece,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let run_id = self.run.run_id;
        let at_ms = self.at_ms(now);
        let r = &mut self.lanes[lane];
        if r.phase != Phase::Running {
            return;
        }
        r.partial.push(&piece);
        if !piece.text().is_empty() {
            self.switch_saw_text(lane, now);
        }
        let r = &mut self.lanes[lane];
        if r.first_token.is_none() {
            r.first_token = Some(now);
            fx.push(Effect::Emit(Event::FirstToken {
                run_id,
                lane,
                at_ms,
            }));
        }
        if !self.run.streaming {
            return;
        }
        match self.stream.committed {
            Some(c) if c == lane => self.forward(piece, now, fx),
            Some(_) => {}
            None => {
                let r = &mut self.lanes[lane];
                r.buffer.push(piece);
                if self.run.commit == CommitMode::FirstToken
                    && self.plan.commits_at_first_token(lane)
                    && !r.cancel_requested
                {
                    self.commit_to(lane, now, fx);
                }
            }
        }
    }

    /// Commits a streaming run to `lane`: its buffered text goes out, the
    /// other lane is cancelled or never started, no escalation follows.
    fn commit_to(&mut self, lane: Lane, now: Instant, fx: &mut Vec<Effect>) {
        if self.stream.committed.is_some() {
            return;
        }
        self.stream.committed = Some(lane);
        for piece in std::mem::take(&mut self.lanes[lane].buffer) {
            self.forward(piece, now, fx);
        }
        let o = lane.other();
        self.lanes[o].buffer.clear();
        self.cancel_lane(o, &format!("run committed to {lane}"), fx);
        self.timers.disarm();
        self.timers.escalate_on_secondary_start = None;
    }

    fn forward(&mut self, piece: Piece, now: Instant, fx: &mut Vec<Effect>) {
        if piece.text().is_empty() || !self.run.streaming {
            return;
        }
        self.stream.caller_first_token.get_or_insert(now);
        match &piece {
            Piece::Answer(t) => self.stream.forwarded_bytes += t.len(),
            Piece::Reasoning(t) => self.stream.forwarded_reasoning_bytes += t.len(),
        }
        fx.push(Effect::Forward(piece));
    }

    /// Sends a streaming caller whatever of the winner's text it has not
    /// received: buffered pieces for an uncommitted winner, then any tail
    /// the backend returned without streaming it.
    pub(super) fn flush_winner(&mut self, w: Lane, now: Instant, fx: &mut Vec<Effect>) {
        if !self.run.streaming {
            return;
        }
        if self.stream.committed.is_none() {
            self.stream.committed = Some(w);
            for piece in std::mem::take(&mut self.lanes[w].buffer) {
                self.forward(piece, now, fx);
            }
        }
        let (text, reasoning) = self.lanes[w]
            .candidate()
            .map(|c| (c.text.clone(), c.reasoning.clone().unwrap_or_default()))
            .unwrap_or_default();
        let sent = self.stream.forwarded_reasoning_bytes;
        if sent < reasoning.len() && reasoning.is_char_boundary(sent) {
            self.forward(Piece::Reasoning(reasoning[sent..].to_string()), now, fx);
        }
        let sent = self.stream.forwarded_bytes;
        if sent < text.len() && text.is_char_boundary(sent) {
            self.forward(Piece::Answer(text[sent..].to_string()), now, fx);
        }
    }
}
