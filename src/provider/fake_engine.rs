//! A Docker engine in memory for the providers' loop tests: the containers
//! `inspect` answers, and the events the test sends, of the provider's kind.

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::mpsc;

use super::docker::{DockerError, EventsOf};
use crate::labels::ContainerFacts;

pub type EventSender<E> = mpsc::UnboundedSender<Result<E, DockerError>>;

pub struct FakeEngine<E> {
    pub containers: Mutex<BTreeMap<String, ContainerFacts>>,
    events: Mutex<Option<mpsc::UnboundedReceiver<Result<E, DockerError>>>>,
}

impl<E: Send + 'static> FakeEngine<E> {
    /// The engine, and where the test sends its events.
    pub fn new(containers: impl IntoIterator<Item = ContainerFacts>) -> (Self, EventSender<E>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let engine = FakeEngine {
            containers: Mutex::new(
                containers
                    .into_iter()
                    .map(|container| (container.id.clone(), container))
                    .collect(),
            ),
            events: Mutex::new(Some(receiver)),
        };
        (engine, sender)
    }

    pub fn container_ids(&self) -> Vec<String> {
        self.containers.lock().unwrap().keys().cloned().collect()
    }

    pub fn inspect(&self, id: &str) -> Option<ContainerFacts> {
        self.containers.lock().unwrap().get(id).cloned()
    }

    /// The events the test sends; a provider subscribes once.
    pub fn subscribe(&self) -> EventsOf<E> {
        let mut receiver = self
            .events
            .lock()
            .unwrap()
            .take()
            .expect("one subscription");
        Box::pin(futures_util::stream::poll_fn(move |cx| {
            receiver.poll_recv(cx)
        }))
    }
}
