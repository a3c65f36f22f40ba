//! The routes file parser on arbitrary bytes. It never panics; a file it
//! accepts, written back with every setting spelled out, reads as the same
//! hosts; a file it refuses is refused with problems whose key paths name
//! keys that are in the file.

#![no_main]

use dockhand::config::parse_routes_file;
use dockhand_fuzz::routes_json::{names_a_key, to_routes_file};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The provider reads the file as UTF-8 and reports other bytes itself.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_routes_file(text) {
        Ok(hosts) => {
            let written = to_routes_file(&hosts).to_string();
            let again = parse_routes_file(&written)
                .unwrap_or_else(|errors| panic!("{written}\nis refused: {errors}"));
            assert_eq!(again, hosts, "{written} reads differently");
        }
        Err(errors) => {
            assert!(!errors.0.is_empty(), "refused without a problem");
            let document: serde_json::Value = match serde_json::from_str(text) {
                Ok(document) => document,
                Err(_) => {
                    assert_eq!(errors.0.len(), 1, "{errors}");
                    assert_eq!(errors.0[0].path, "", "{errors}");
                    return;
                }
            };
            for error in &errors.0 {
                assert!(
                    names_a_key(&document, &error.path),
                    "`{}` names no key of {text}",
                    error.path
                );
                assert!(!error.reason.is_empty(), "no reason at {}", error.path);
            }
        }
    }
});
