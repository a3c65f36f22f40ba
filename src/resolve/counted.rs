//! `CountedDns`: any `Dns` with each query counted in the metrics by record
//! type and result, so every lookup dockhand makes (upstream names, SRV
//! owners and targets, DNS servers written as names) is counted once, in
//! one place, whichever part asked.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use super::{Dns, IpAnswer, LookupError, SrvAnswer};
use crate::metrics::Metrics;

pub struct CountedDns {
    inner: Arc<dyn Dns>,
    metrics: Arc<Metrics>,
}

impl CountedDns {
    pub fn new(inner: Arc<dyn Dns>, metrics: Arc<Metrics>) -> CountedDns {
        CountedDns { inner, metrics }
    }

    fn count<T>(&self, record: &'static str, result: &Result<T, LookupError>) {
        let result = match result {
            Ok(_) => "success",
            Err(LookupError::NotFound) => "not_found",
            Err(LookupError::Failed(_)) => "failure",
        };
        self.metrics.dns_lookup(record, result);
    }
}

impl Dns for CountedDns {
    fn lookup_ip<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<IpAnswer, LookupError>> {
        self.inner
            .lookup_ip(name)
            .inspect(|result| self.count("A/AAAA", result))
            .boxed()
    }

    fn lookup_srv<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<SrvAnswer, LookupError>> {
        self.inner
            .lookup_srv(owner)
            .inspect(|result| self.count("SRV", result))
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Answers;

    impl Dns for Answers {
        fn lookup_ip<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<IpAnswer, LookupError>> {
            let result = match name {
                "up.test" => Ok(IpAnswer {
                    addresses: vec!["10.0.0.1".parse().unwrap()],
                    ttl: std::time::Duration::from_secs(5),
                }),
                "gone.test" => Err(LookupError::NotFound),
                _ => Err(LookupError::Failed("SERVFAIL".into())),
            };
            Box::pin(async move { result })
        }

        fn lookup_srv<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<SrvAnswer, LookupError>> {
            Box::pin(async { Err(LookupError::NotFound) })
        }
    }

    #[tokio::test]
    async fn each_query_counts_once_by_record_type_and_result() {
        let metrics = Arc::new(Metrics::default());
        let dns = CountedDns::new(Arc::new(Answers), metrics.clone());
        for name in ["up.test", "up.test", "gone.test", "broken.test"] {
            let _ = dns.lookup_ip(name).await;
        }
        let _ = dns.lookup_srv("_app._tcp.test").await;
        let text = metrics.render(&());
        for line in [
            r#"dockhand_dns_lookups_total{record="A/AAAA",result="success"} 2"#,
            r#"dockhand_dns_lookups_total{record="A/AAAA",result="not_found"} 1"#,
            r#"dockhand_dns_lookups_total{record="A/AAAA",result="failure"} 1"#,
            r#"dockhand_dns_lookups_total{record="SRV",result="not_found"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
    }
}
