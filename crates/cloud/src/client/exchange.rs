//! One request/response exchange: sending the body, waiting for the
//! headers under the job's deadline and cancellation, turning a non-success
//! status into its typed error, and handing the body to the whole or the
//! stream reader. It must not decide retries or admission.

use super::body::{BodyReader, Next};
use super::continuation;
use super::{Inner, Probe, MAX_ERROR_BODY};
use crate::error::CloudError;
use crate::net::{self, ConnectProbe};
use crate::status;
use crate::CloudCompletion;
use edgecloud_core::lane::{CancellationToken, LaneJob};
use edgecloud_core::request::validate_parts;
use edgecloud_wire::openai::ChatRequest;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use std::sync::Arc;
use std::time::{Instant, SystemTime};
use tokio::time::Instant as TokioInstant;

impl Inner {
    pub(super) async fn exchange(
        &self,
        job: &mut LaneJob,
        probe: &mut Probe,
    ) -> Result<CloudCompletion, CloudError> {
        // The cloud lane's door (it may be used alone): the request's one
        // validator.
        validate_parts(&job.messages, &job.sampling)?;
        if job.cancel.is_cancelled() {
            return Err(CloudError::Cancelled);
        }
        if Instant::now() >= job.deadline {
            return Err(CloudError::DeadlineBeforeHeaders);
        }
        let deadline = TokioInstant::from_std(job.deadline);
        let cfg = &self.config;
        let messages = continuation::messages(&job.messages, cfg.continue_with);
        let body = ChatRequest::new(
            job.model.as_deref().unwrap_or(&cfg.model),
            &messages,
            &job.sampling,
            cfg.stream,
            cfg.stream_usage,
            cfg.send_top_k,
        );
        let body = continuation::body(&body, &job.messages, cfg.continue_with);
        let accept = if cfg.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut request = self
            .client
            .post(self.endpoint.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, accept)
            .body(body);
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }

        let connect = Arc::new(ConnectProbe::default());
        let send = net::with_connect_probe(Arc::clone(&connect), request.send());
        let response = tokio::select! {
            biased;
            _ = job.cancel.cancelled() => return Err(CloudError::Cancelled),
            _ = tokio::time::sleep_until(deadline) => return Err(CloudError::DeadlineBeforeHeaders),
            r = send => r.map_err(|e| net::classify_send_error(e, &self.endpoint, cfg))?,
        };
        probe.timings.connect = connect.elapsed();
        probe.timings.ttfb = Some(probe.since_start());
        let status = response.status().as_u16();
        probe.status = Some(status);

        let header_bytes: usize = response
            .headers()
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum();
        if header_bytes > cfg.limits.max_header_bytes {
            return Err(CloudError::HeadersTooLarge {
                limit: cfg.limits.max_header_bytes,
            });
        }

        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|ct| ct.trim().to_ascii_lowercase())
            .filter(|ct| !ct.is_empty())
            // Without a content type, trust what we asked for; with one,
            // only an event stream is read as one (an HTML error page from
            // a proxy must not pass for an empty stream).
            .map_or(cfg.stream, |ct| ct.starts_with("text/event-stream"));

        if !response.status().is_success() {
            return Err(self.status_error(response, deadline, &job.cancel).await);
        }
        if let Some(len) = response.content_length() {
            if len > cfg.limits.max_body_bytes as u64 {
                return Err(CloudError::BodyTooLarge {
                    limit: cfg.limits.max_body_bytes,
                });
            }
        }
        // The job itself goes to the readers (its sinks); the reader
        // watches a clone of its token.
        let cancel = job.cancel.clone();
        let mut reader = BodyReader {
            response,
            deadline,
            cancel: &cancel,
            stall: cfg.stall_timeout,
            read: 0,
            cap: cfg.limits.max_body_bytes,
        };
        if is_sse {
            self.read_stream(reader, job, probe, status).await
        } else {
            self.read_whole(&mut reader, job, probe, status).await
        }
    }

    pub(super) async fn status_error(
        &self,
        response: reqwest::Response,
        deadline: TokioInstant,
        cancel: &CancellationToken,
    ) -> CloudError {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let cap = MAX_ERROR_BODY.min(self.config.limits.max_body_bytes);
        let mut reader = BodyReader {
            response,
            deadline,
            cancel,
            stall: self.config.stall_timeout,
            read: 0,
            cap: usize::MAX,
        };
        let mut body = Vec::new();
        // Whatever arrives before the body ends, the cap, the deadline or a
        // stall is the message; the status alone already decides the variant.
        while let Ok(Next::Data(bytes)) = reader.next().await {
            body.extend_from_slice(&bytes);
            if body.len() >= cap {
                body.truncate(cap);
                break;
            }
        }
        status::error_for(status, &headers, &body, &self.scrubber, SystemTime::now())
    }
}
