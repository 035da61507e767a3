//! One leader among the `cleave run --cluster` replicas: a coordination.k8s.io/v1 Lease,
//! taken when it is free or expired and renewed by its holder; every write carries the
//! resourceVersion it read, so two candidates never both win (the apiserver answers the
//! second 409). client-go's leaderelection in ~100 lines: no clock is trusted but the
//! candidate's own, a lease is expired when its holder let `LEASE` pass since *we* last
//! saw it change.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use tracing::{info, warn};

pub const LEASE: Duration = Duration::from_secs(15);
pub const RENEW: Duration = Duration::from_secs(5);

pub struct Election {
    api: Api<Lease>,
    name: String,
    identity: String,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl Election {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str) -> Election {
        Election {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
        }
    }

    fn spec(&self, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE.as_secs() as i32),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Waits until this candidate holds the lease.
    pub async fn acquire(&self) -> Result<(), kube::Error> {
        // (holder, renewTime) as last seen, and when we saw it.
        let mut seen: Option<(Option<String>, Option<String>, Instant)> = None;
        loop {
            match self.api.get_opt(&self.name).await? {
                None => {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(self.name.clone()),
                            ..Default::default()
                        },
                        spec: Some(self.spec(0)),
                    };
                    match self.api.create(&PostParams::default(), &lease).await {
                        Ok(_) => return Ok(()),
                        Err(kube::Error::Api(s)) if s.code == 409 => {}
                        Err(e) => return Err(e),
                    }
                }
                Some(mut lease) => {
                    let spec = lease.spec.clone().unwrap_or_default();
                    let holder = spec.holder_identity.clone();
                    let renew = spec.renew_time.as_ref().map(|t| t.0.to_string());
                    let mine = holder.as_deref() == Some(self.identity.as_str());
                    let free = holder.as_deref().is_none_or(str::is_empty);
                    let expired = match &seen {
                        Some((h, r, at)) if *h == holder && *r == renew => {
                            at.elapsed()
                                >= Duration::from_secs(
                                    spec.lease_duration_seconds.unwrap_or(15).max(1) as u64,
                                )
                        }
                        _ => {
                            seen = Some((holder.clone(), renew, Instant::now()));
                            false
                        }
                    };
                    if mine || free || expired {
                        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!mine);
                        lease.spec = Some(self.spec(transitions));
                        match self
                            .api
                            .replace(&self.name, &PostParams::default(), &lease)
                            .await
                        {
                            Ok(_) => {
                                info!(lease = %self.name, previous = holder.as_deref().unwrap_or(""), "leader: lease taken");
                                return Ok(());
                            }
                            Err(kube::Error::Api(s)) if s.code == 409 => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    /// Renews the lease every `RENEW`; returns when it could not be renewed for `LEASE`
    /// (or another holder took it): the leader must stop acting then.
    pub async fn hold(&self) {
        let mut last_ok = Instant::now();
        loop {
            tokio::time::sleep(RENEW).await;
            match self.renew().await {
                Ok(true) => last_ok = Instant::now(),
                Ok(false) => {
                    warn!(lease = %self.name, "leader: another candidate holds the lease now");
                    return;
                }
                Err(e) => {
                    warn!(lease = %self.name, error = %e, "leader: renewing the lease failed")
                }
            }
            if last_ok.elapsed() >= LEASE.saturating_sub(RENEW) {
                warn!(lease = %self.name, "leader: lease not renewed in time; stepping down");
                return;
            }
        }
    }

    async fn renew(&self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(false);
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(false);
        }
        spec.renew_time = Some(now());
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// On a clean shutdown: hands the lease back so the next replica need not wait for
    /// it to expire.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await {
            let mut spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                spec.holder_identity = None;
                lease.spec = Some(spec);
                let _ = self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await;
            }
        }
    }
}
