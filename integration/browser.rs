//! A real browser for the suite: Debian's headless `chromium` (or the binary
//! in `DOCKHAND_CHROMIUM`), driven over the Chrome DevTools Protocol on a
//! WebSocket, so a test can load a page once and watch it change without a
//! reload (`--dump-dom` only ever sees one moment).
//!
//! One [`Browser`] is one chromium process with a temporary profile and one
//! page; it is closed (and killed if it lingers) on drop. Every call is
//! bounded: commands by the socket's read limit, waits by [`wait_until_within`].

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{Message, WebSocket};

use crate::support::*;

/// The browser window: 1280 wide, as the README's screenshot.
const WINDOW: (u32, u32) = (1280, 900);

/// Headless chromium with one page open on `about:blank`.
pub struct Browser {
    /// The browser's own DevTools socket.
    socket: WebSocket<TcpStream>,
    /// The page's session on it, once attached.
    session: Option<Value>,
    next_id: u64,
    // Dropped in this order: the process ends before its profile is removed.
    _process: BrowserProcess,
    _profile: tempfile::TempDir,
}

/// The chromium process: given a few seconds to exit after `Browser.close`,
/// then killed, also when a test fails before the page is reached.
struct BrowserProcess(Child);

impl Browser {
    /// Starts chromium, or `None` when it is not installed (a skip on a
    /// developer's machine; under `CI=true`, where `.ci/run` installs it, a
    /// failure).
    pub fn launch() -> Option<Browser> {
        let binary = std::env::var("DOCKHAND_CHROMIUM").unwrap_or_else(|_| "chromium".into());
        if Command::new(&binary).arg("--version").output().is_err() {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "{binary} is not installed (.ci/run installs Debian's chromium)"
            );
            eprintln!("skipped: {binary} is not installed");
            return None;
        }
        let profile = tempfile::tempdir().expect("a temporary browser profile");
        let process = Command::new(&binary)
            .args([
                "--headless",
                // The suite runs as root, where chromium's sandbox cannot start.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                // The suite's hosts (`<what>.<run>.test`) are dockhand's, on
                // loopback: a page can be loaded by its host name.
                "--host-resolver-rules=MAP *.test 127.0.0.1",
                "--remote-debugging-address=127.0.0.1",
                // Port 0: chromium picks one and writes it to DevToolsActivePort.
                "--remote-debugging-port=0",
                &format!("--window-size={},{}", WINDOW.0, WINDOW.1),
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {binary}: {e}"));
        let process = BrowserProcess(process);
        let (devtools, path) = devtools_endpoint(profile.path());
        let socket = websocket(devtools, &devtools.to_string(), &path)
            .unwrap_or_else(|e| panic!("CDP socket to {devtools}{path}: {e}"));
        let mut browser = Browser {
            socket,
            session: None,
            next_id: 0,
            _process: process,
            _profile: profile,
        };
        // The page chromium opened; its commands then go to its session.
        let page = wait_until_ok("chromium's page", || {
            let targets = browser.command("Target.getTargets", json!({}));
            targets["targetInfos"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|target| target["type"] == "page")
                .map(|target| target["targetId"].clone())
                .ok_or_else(|| format!("no page among {targets}"))
        });
        let attached = browser.command(
            "Target.attachToTarget",
            json!({"targetId": page, "flatten": true}),
        );
        browser.session = Some(attached["sessionId"].clone());
        browser.command("Page.enable", json!({}));
        browser.command("Runtime.enable", json!({}));
        Some(browser)
    }

    /// Sends one command (to the page once attached) and returns its
    /// `result`; events in between are skipped.
    #[track_caller]
    pub fn command(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut request = json!({"id": id, "method": method, "params": params});
        if let Some(session) = &self.session {
            request["sessionId"] = session.clone();
        }
        self.socket
            .send(Message::text(request.to_string()))
            .unwrap_or_else(|e| panic!("CDP {method}: send: {e}"));
        let started = Instant::now();
        loop {
            assert!(
                started.elapsed() < WAIT_LIMIT,
                "CDP {method}: no answer within {WAIT_LIMIT:?}"
            );
            let message = self
                .socket
                .read()
                .unwrap_or_else(|e| panic!("CDP {method}: read: {e}"));
            let Message::Text(text) = message else {
                continue;
            };
            let answer: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("CDP {method}: not JSON ({e}): {text}"));
            if answer["id"] != id {
                continue;
            }
            if let Some(error) = answer.get("error") {
                panic!("CDP {method} failed: {error}");
            }
            return answer["result"].clone();
        }
    }

    /// Opens `url` in the page (the one navigation a test makes).
    #[track_caller]
    pub fn navigate(&mut self, url: &str) {
        let result = self.command("Page.navigate", json!({"url": url}));
        if let Some(error) = result.get("errorText") {
            panic!("navigating to {url}: {error}");
        }
    }

    /// The value of a JavaScript expression in the page (promises awaited);
    /// `Err` with the exception's text when it throws.
    pub fn evaluate(&mut self, expression: &str) -> Result<Value, String> {
        let result = self.command(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(exception) = result.get("exceptionDetails") {
            return Err(exception["exception"]["description"]
                .as_str()
                .map_or_else(|| exception.to_string(), str::to_owned));
        }
        Ok(result["result"]["value"].clone())
    }

    /// Evaluates `expression` every 50 ms until it gives something other than
    /// `null`, `false`, `0` or `""`, for at most [`WAIT_LIMIT`]; that value.
    #[track_caller]
    pub fn wait_for(&mut self, what: &str, expression: &str) -> Value {
        self.wait_for_value(what, expression, |value| {
            !matches!(value, Value::Null | Value::Bool(false))
                && value.as_str() != Some("")
                && value.as_f64() != Some(0.0)
        })
    }

    /// Evaluates `expression` every 50 ms until `accept` takes its value, for
    /// at most [`WAIT_LIMIT`]; that value. The panic shows the last one.
    #[track_caller]
    pub fn wait_for_value(
        &mut self,
        what: &str,
        expression: &str,
        accept: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_until_within(WAIT_LIMIT, what, || match self.evaluate(expression) {
            Ok(value) if accept(&value) => Ok(value),
            Ok(value) => Err(format!("the page gave {value}")),
            Err(exception) => Err(exception),
        })
    }

    /// Types `text` into the element `selector` finds, as a user would (one
    /// key event per character), so the page's own handlers see it.
    #[track_caller]
    pub fn type_into(&mut self, selector: &str, text: &str) {
        let focused = self
            .evaluate(&format!(
                "(() => {{ const e = document.querySelector({}); if (!e) return false; e.focus(); return true; }})()",
                json!(selector)
            ))
            .unwrap_or_else(|e| panic!("focusing {selector}: {e}"));
        assert_eq!(focused, json!(true), "no element matches {selector}");
        self.command("Input.insertText", json!({"text": text}));
    }

    /// Presses Enter in the focused element (submits its form).
    pub fn press_enter(&mut self) {
        for kind in ["keyDown", "keyUp"] {
            self.command(
                "Input.dispatchKeyEvent",
                json!({"type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"}),
            );
        }
    }

    /// A PNG of the whole page at the window's width, written to `path`.
    #[track_caller]
    pub fn screenshot(&mut self, path: &Path) {
        let height = self
            .evaluate("Math.ceil(document.documentElement.scrollHeight)")
            .ok()
            .and_then(|height| height.as_u64())
            .unwrap_or(u64::from(WINDOW.1));
        self.command(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": WINDOW.0, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        let shot = self.command("Page.captureScreenshot", json!({"format": "png"}));
        let png = decode_base64(shot["data"].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("Page.captureScreenshot: {e}"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        self.command("Emulation.clearDeviceMetricsOverride", json!({}));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Browser.close ends every chromium process of this profile.
        let close = json!({"id": 0, "method": "Browser.close"}).to_string();
        let _ = self.socket.send(Message::text(close));
    }
}

impl Drop for BrowserProcess {
    fn drop(&mut self) {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where chromium's DevTools listen: the port and browser path it wrote to
/// `<profile>/DevToolsActivePort`.
fn devtools_endpoint(profile: &Path) -> (SocketAddr, String) {
    let file = profile.join("DevToolsActivePort");
    wait_until_ok("chromium to open its DevTools port", || {
        let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
        let mut lines = text.lines();
        let port: Option<u16> = lines.next().and_then(|line| line.trim().parse().ok());
        match (port, lines.next()) {
            (Some(port), Some(path)) => Ok((
                SocketAddr::from(([127, 0, 0, 1], port)),
                path.trim().to_owned(),
            )),
            _ => Err(format!("not written yet: {text:?}")),
        }
    })
}
/// Standard base64 (RFC 4648 §4, with padding), as CDP sends binary data.
fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    let (mut bits, mut held) = (0u32, 0u32);
    for c in text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
    {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("not base64: {:?}", c as char)),
        };
        // At most 13 bits are ever held; older ones are shifted out.
        bits = ((bits << 6) | u32::from(value)) & 0xffff;
        held += 6;
        if held >= 8 {
            held -= 8;
            bytes.push((bits >> held) as u8);
        }
    }
    Ok(bytes)
}

#[test]
fn base64_decodes_what_rfc_4648_section_10_lists() {
    for (encoded, decoded) in [
        ("", ""),
        ("Zg==", "f"),
        ("Zm8=", "fo"),
        ("Zm9v", "foo"),
        ("Zm9vYg==", "foob"),
        ("Zm9vYmE=", "fooba"),
        ("Zm9vYmFy", "foobar"),
    ] {
        assert_eq!(decode_base64(encoded).unwrap(), decoded.as_bytes());
    }
    assert!(decode_base64("Zm9v!").is_err());
}
