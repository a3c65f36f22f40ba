//! Middleware settings read from the routes file (labels are covered by
//! the golden cases in tests/labels): every key, and every refusal at its
//! key path.

use std::time::Duration;

use super::auth::rejoin_hashes;
use super::*;
use crate::config::parse_routes_file;
use crate::config::UpstreamTarget;

/// The middlewares of the only location, or the problems of the file.
fn read(settings: &str) -> Result<Middlewares, String> {
    let file = format!(
        r#"{{"host": {{"a.com": {{"location": {{"/": {{{settings},
            "upstream": {{"127.0.0.1:9000": {{}}}}}}}}}}}}}}"#
    );
    parse_routes_file(&file)
        .map(|hosts| hosts.hosts[0].locations[0].middlewares.clone())
        .map_err(|errors| errors.to_string())
}

const AT: &str = r#"host."a.com".location."/""#;

#[test]
fn a_location_without_middlewares_has_none() {
    assert!(read(r#""load_balancing": "round_robin""#)
        .unwrap()
        .is_empty());
}

#[test]
fn every_key_is_read() {
    let middlewares = read(
        r#""ip_allow": ["10.0.0.0/8", "192.0.2.7"],
           "max_body_size": "2m",
           "rate_limit": {"average": 100, "period": "1m", "by": "header:X-Api-Key"},
           "redirect": {"regex": "^http://www\\.(.*)", "replacement": "http://$1", "permanent": true},
           "headers": {"response": {"set": {"X-Frame-Options": "DENY"}, "remove": ["Server"]},
                       "security": true},
           "cors": {"allow_origins": ["https://app.example.com", "*.example.org"],
                    "allow_methods": ["GET", "PUT"], "allow_headers": ["X-Token"],
                    "allow_credentials": true, "max_age": 600}"#,
    )
    .unwrap();
    let networks: Vec<String> = middlewares
        .ip_allow
        .unwrap()
        .iter()
        .map(IpNet::to_string)
        .collect();
    assert_eq!(networks, ["10.0.0.0/8", "192.0.2.7/32"]);
    assert_eq!(middlewares.max_body_size, Some(2 << 20));
    assert_eq!(
        middlewares.rate_limit,
        Some(RateLimit {
            average: 100,
            burst: 100,
            period: Duration::from_secs(60),
            by: RateLimitKey::Header(HeaderName::from_static("x-api-key")),
        })
    );
    let redirect = middlewares.redirect.unwrap();
    assert_eq!(redirect.regex.as_str(), "^http://www\\.(.*)");
    assert_eq!(redirect.replacement, "http://$1");
    assert!(redirect.permanent);
    let headers = middlewares.response_headers;
    assert_eq!(headers.set[0].0, "x-frame-options");
    assert_eq!(headers.set[0].1, "DENY");
    assert_eq!(headers.remove, ["server"]);
    assert!(headers.security);
    let cors = middlewares.cors.unwrap();
    assert_eq!(
        cors.allow_origins,
        [
            OriginPattern::Exact("https://app.example.com".into()),
            OriginPattern::Subdomains(".example.org".into())
        ]
    );
    assert_eq!(cors.allow_methods, "GET, PUT");
    assert_eq!(cors.allow_headers.unwrap(), "x-token");
    assert!(cors.allow_credentials);
    assert_eq!(cors.max_age, Some(600));
}

#[test]
fn bad_values_are_refused_at_their_key_path() {
    let cases = [
        (
            r#""ip_allow": ["10.0.0.0/33"]"#,
            format!("{AT}.ip_allow: `10.0.0.0/33` is not a CIDR or an IP address"),
        ),
        (
            r#""ip_allow": "10.0.0.0/8""#,
            format!("{AT}.ip_allow: expected an array of strings, found a string"),
        ),
        (
            r#""rate_limit": {"burst": 5}"#,
            format!("{AT}.rate_limit: a rate limit needs rate_limit.average, the requests allowed per period"),
        ),
        (
            r#""rate_limit": {"average": 5, "period": "2d"}"#,
            format!("{AT}.rate_limit.period: `2d` has an unknown unit `d` (use ms, s, m or h)"),
        ),
        (
            r#""rate_limit": {"average": 0}"#,
            format!("{AT}.rate_limit.average: must be a whole number from 1 to 1000000, found 0"),
        ),
        (
            r#""rate_limit": {"average": 5, "by": "cookie"}"#,
            format!("{AT}.rate_limit.by: `cookie`: expected `client` or `header:<Header-Name>`"),
        ),
        (
            r#""basic_auth": {"users": ["alice:secret"]}"#,
            format!("{AT}.basic_auth.users: user `alice`: the hash is neither bcrypt ($2y$) nor argon2id ($argon2id$): htpasswd -B makes bcrypt ones"),
        ),
        (
            r#""basic_auth": {"users": ["alice:$2y$05$tooshort"]}"#,
            format!("{AT}.basic_auth.users: user `alice`: the bcrypt hash is malformed"),
        ),
        (
            r#""basic_auth": {"realm": "Admin"}"#,
            format!("{AT}.basic_auth: basic auth needs basic_auth.users (user:hash pairs) or basic_auth.users_file"),
        ),
        (
            r#""basic_auth": {"users_file": "htpasswd"}"#,
            format!("{AT}.basic_auth.users_file: `htpasswd` is not an absolute path"),
        ),
        (
            r#""basic_auth": {"users": ["nohash"]}"#,
            format!("{AT}.basic_auth.users: expected user:hash pairs (htpasswd lines)"),
        ),
        (
            r#""forward_auth": {"address": "auth:9091"}"#,
            format!("{AT}.forward_auth.address: `auth:9091` is not an http:// or https:// URL"),
        ),
        (
            r#""forward_auth": {"address": "http://user:pw@auth:9091/"}"#,
            format!("{AT}.forward_auth.address: `http://user:pw@auth:9091/`: credentials in the URL are not sent; leave them out"),
        ),
        (
            r#""forward_auth": {"response_headers": ["Remote-User"]}"#,
            format!("{AT}.forward_auth: forward auth needs forward_auth.address, the auth service's URL"),
        ),
        (
            r#""max_body_size": "10q""#,
            format!("{AT}.max_body_size: `10q` is not a size: bytes, or a number with k, m or g (such as 10m)"),
        ),
        (
            r#""redirect": {"regex": "^(", "replacement": "/"}"#,
            format!("{AT}.redirect.regex: unclosed group"),
        ),
        (
            r#""redirect": {"regex": "^/old"}"#,
            format!("{AT}.redirect: a redirect needs redirect.replacement, the URL to send to"),
        ),
        (
            r#""headers": {"response": {"set": {"Bad Name": "x"}}}"#,
            format!("{AT}.headers.response.set.\"Bad Name\": `Bad Name` is not a valid header name"),
        ),
        (
            r#""headers": {"response": {"set": {"X-A": "1", "x-a": "2"}}}"#,
            format!("{AT}.headers.response.set.\"x-a\": `x-a` is set twice (header names ignore case)"),
        ),
        (
            r#""cors": {"allow_origins": ["*"], "allow_credentials": true}"#,
            format!("{AT}.cors.allow_credentials: `*` can't go with credentials (browsers refuse it): name the origins"),
        ),
        (
            r#""cors": {"allow_methods": ["GET"]}"#,
            format!("{AT}.cors: CORS needs cors.allow_origins, the origins allowed"),
        ),
        (
            r#""cors": {"allow_origins": ["example.com"]}"#,
            format!("{AT}.cors.allow_origins: `example.com` is not an origin: write scheme://host[:port], *.domain or *"),
        ),
        (
            r#""cors": {"allow_origin": ["*"]}"#,
            format!("{AT}.cors: unknown key `allow_origin` (did you mean `allow_origins`?)"),
        ),
        (
            r#""compress": []"#,
            format!("{AT}.compress: is empty"),
        ),
        (
            r#""compress": ["gzip", "deflate"]"#,
            format!("{AT}.compress: `deflate` is not an encoding dockhand compresses with: gzip, br or zstd"),
        ),
        (
            r#""compress": "gzip""#,
            format!("{AT}.compress: expected true, false or an array of strings, found a string"),
        ),
        (
            r#""redirekt": {}"#,
            format!("{AT}: unknown key `redirekt` (did you mean `redirect`?)"),
        ),
    ];
    for (settings, expected) in cases {
        assert_eq!(read(settings).unwrap_err(), expected, "{settings}");
    }
}

#[test]
fn compress_is_every_encoding_or_those_named_in_dockhand_s_order() {
    use Encoding::{Brotli, Gzip, Zstd};
    let compress = |value: &str| read(&format!(r#""compress": {value}"#)).unwrap().compress;
    assert_eq!(compress("true"), Some(vec![Brotli, Zstd, Gzip]));
    assert_eq!(compress("false"), None);
    assert_eq!(
        compress(r#"["gzip", "BR", "gzip"]"#),
        Some(vec![Brotli, Gzip])
    );
    assert_eq!(compress(r#"["zstd"]"#), Some(vec![Zstd]));
    let described = read(r#""compress": ["gzip", "zstd"]"#).unwrap().describe();
    assert_eq!(described, [("compress", "compress zstd,gzip".to_owned())]);
}

#[test]
fn sizes_take_binary_units() {
    assert_eq!(body_size("512"), Ok(512));
    assert_eq!(body_size("64k"), Ok(64 << 10));
    assert_eq!(body_size("10MB"), Ok(10 << 20));
    assert_eq!(body_size("1GiB"), Ok(1 << 30));
    assert!(body_size("0").is_err());
    assert!(body_size("2048g").is_err(), "past 1 TiB");
    assert!(body_size("99999999999999999999").is_err());
    assert!(body_size("m").is_err());
}

#[test]
fn origins_match_exactly_or_below_a_domain() {
    let exact = origin_pattern("https://App.example.com/").unwrap();
    assert!(exact.allows("https://app.example.com"));
    assert!(!exact.allows("http://app.example.com"));
    assert!(!exact.allows("https://app.example.com:8443"));
    let below = origin_pattern("*.example.com").unwrap();
    assert!(below.allows("https://a.example.com"));
    assert!(below.allows("http://a.b.example.com:8080"));
    assert!(!below.allows("https://example.com"));
    assert!(!below.allows("https://badexample.com"));
    assert!(!below.allows("null"));
    assert!(origin_pattern("*").unwrap().allows("null"));
}

#[test]
fn users_are_read_with_their_hashes_and_argon2_commas_survive_a_label_list() {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let salt = SaltString::encode_b64(b"sixteen byte salt").unwrap();
    let argon2 = argon2::Argon2::default()
        .hash_password(b"hunter2", &salt)
        .unwrap()
        .to_string();
    assert!(argon2.contains(','), "its parameters: {argon2}");
    let bcrypt = bcrypt::hash("secret", 4).unwrap();
    // As a label's comma-separated list splits them.
    let label = format!("carol:{argon2}, alice:{bcrypt}");
    let items: Vec<String> = label.split(',').map(str::to_owned).collect();
    let users: Vec<BasicAuthUser> = rejoin_hashes(items)
        .iter()
        .map(|item| user(item).unwrap())
        .collect();
    assert_eq!(users[0].name, "carol");
    assert!(users[0].hash == PasswordHash::Argon2id(argon2));
    assert_eq!(users[1].name, "alice");
    assert!(users[1].hash == PasswordHash::Bcrypt(bcrypt));
    // Never shown, even in a debug print.
    assert_eq!(format!("{:?}", users[1]), "BasicAuthUser(alice)");
    let md5 = user("bob:$apr1$salt$hash").unwrap_err();
    assert!(md5.contains("neither bcrypt"), "{md5}");
}

#[test]
fn forward_auth_addresses_are_names_or_addresses_with_the_schemes_port() {
    let auth =
        forward_auth_address("http://authelia:9091/api/verify?rd=https://login.test").unwrap();
    assert_eq!(
        auth.target,
        UpstreamTarget::Name {
            host: "authelia".into(),
            port: 9091
        }
    );
    assert!(!auth.tls);
    assert_eq!(auth.authority, "authelia:9091");
    assert_eq!(auth.path, "/api/verify?rd=https://login.test");
    let tls = forward_auth_address("https://10.0.0.5").unwrap();
    assert_eq!(
        tls.target,
        UpstreamTarget::Address("10.0.0.5:443".parse().unwrap())
    );
    assert!(tls.tls);
    assert_eq!(tls.path, "/");
    let v6 = forward_auth_address("http://[::1]:4180/oauth2/auth").unwrap();
    assert_eq!(
        v6.target,
        UpstreamTarget::Address("[::1]:4180".parse().unwrap())
    );
}
