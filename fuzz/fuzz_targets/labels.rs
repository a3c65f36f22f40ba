//! The labels pipeline on arbitrary labels (see `labels_input` for the
//! format). It never panics; every diagnostic is about one of the containers
//! and names a label it carries (or could carry to fix it); and the result
//! does not depend on the order the containers are listed in.

#![no_main]

use dockhand::config::Origin;
use dockhand::labels::{build_hosts, dns_server_names};
use dockhand_fuzz::labels_input::{containers, is_real_label, proxy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let containers = containers(&text);
    let proxy = proxy();
    let (hosts, diagnostics) = build_hosts(&containers, &proxy);
    for diagnostic in &diagnostics {
        let Origin::Container { name, .. } = &diagnostic.origin else {
            panic!("not a container's: {diagnostic}");
        };
        let container = containers
            .iter()
            .find(|container| &container.name == name)
            .unwrap_or_else(|| panic!("no such container: {diagnostic}"));
        assert!(
            is_real_label(&container.labels, &diagnostic.key),
            "{diagnostic} names no label of {:?}",
            container.labels
        );
    }
    let reversed: Vec<_> = containers.iter().rev().cloned().collect();
    assert_eq!(
        build_hosts(&reversed, &proxy),
        (hosts, diagnostics),
        "the order of the containers changed the result"
    );
    let named = dns_server_names(&containers, &proxy);
    for server in &named {
        assert!(!server.name.is_empty(), "{server:?}");
    }
});
