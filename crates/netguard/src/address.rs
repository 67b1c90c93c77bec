//! Which IP addresses are not public, and why: the classification every check ends in.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not public.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Blocked {
    /// `0.0.0.0/8` or `::`: a listener's "any address", not a destination.
    Unspecified,
    /// `127.0.0.0/8` or `::1`.
    Loopback,
    /// RFC 1918, unique local (`fc00::/7`) and deprecated site-local (`fec0::/10`) addresses.
    Private,
    /// `100.64.0.0/10` (RFC 6598), which Tailscale uses too.
    CarrierGradeNat,
    /// `169.254.0.0/16` or `fe80::/10`.
    LinkLocal,
    /// A cloud provider's instance metadata or host service endpoint.
    CloudMetadata,
    /// `224.0.0.0/4` or `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// Ranges reserved for examples (RFC 5737, RFC 3849, RFC 9637).
    Documentation,
    /// Ranges reserved for benchmarking (RFC 2544, RFC 5180).
    Benchmarking,
    /// Other special-purpose or unallocated space.
    Reserved,
    /// `2001::/32` (RFC 4380).
    Teredo,
}

impl Blocked {
    /// Whether `allow_private_network = true` on a server admits this class: the ranges a
    /// developer's or a company's own servers live in. Link-local is not among them: it is
    /// the neighbourhood of the metadata endpoints, and no configured server lives there.
    pub fn is_private_network(self) -> bool {
        matches!(self, Self::Loopback | Self::Private | Self::CarrierGradeNat)
    }

    /// Whether nothing admits this class, not even an allowlist entry: these addresses are
    /// never a meaningful destination.
    pub fn is_never_allowed(self) -> bool {
        matches!(self, Self::Unspecified | Self::Multicast | Self::Broadcast)
    }

    /// A short lower-case name, as used in refusal messages.
    pub fn label(self) -> &'static str {
        match self {
            Self::Unspecified => "unspecified",
            Self::Loopback => "loopback",
            Self::Private => "private network",
            Self::CarrierGradeNat => "carrier-grade NAT",
            Self::LinkLocal => "link-local",
            Self::CloudMetadata => "cloud metadata endpoint",
            Self::Multicast => "multicast",
            Self::Broadcast => "broadcast",
            Self::Documentation => "documentation range",
            Self::Benchmarking => "benchmarking range",
            Self::Reserved => "reserved",
            Self::Teredo => "Teredo tunnel",
        }
    }
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Why `ip` is not a public address, or `None` when it is.
///
/// An address is public unless it falls in one of the ranges below (IANA's special-purpose
/// registries, RFC 6890, plus the cloud metadata endpoints). Addresses that carry an IPv4
/// address inside an IPv6 one are judged by the IPv4 address they lead to.
///
/// | range | class |
/// |---|---|
/// | `0.0.0.0/8`, `::` | unspecified (`0.0.0.0` reaches this machine on Linux and macOS) |
/// | `127.0.0.0/8`, `::1` | loopback |
/// | `10/8`, `172.16/12`, `192.168/16`, `fc00::/7`, `fec0::/10` (deprecated site-local) | private |
/// | `100.64.0.0/10` | carrier-grade NAT (also Tailscale's addresses) |
/// | `169.254.0.0/16`, `fe80::/10` | link-local |
/// | `169.254.169.254`, `169.254.170.2`, `169.254.170.23`, `100.100.100.200`, `168.63.129.16`, `fd00:ec2::254`, `fd00:ec2::23`, `fd20:ce::254` | cloud metadata (checked before the ranges they sit in) |
/// | `224.0.0.0/4`, `ff00::/8` | multicast |
/// | `255.255.255.255` | broadcast |
/// | `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20` | documentation |
/// | `198.18.0.0/15`, `2001:2::/48` | benchmarking |
/// | `192.0.0.0/24`, `192.88.99.0/24`, `240.0.0.0/4`, `2001::/23` (rest), `64:ff9b:1::/48`, IPv4-compatible `::a.b.c.d` with a public `a.b.c.d`, anything outside `2000::/3` not named here (`100::/64`, `5f00::/16`, ...) | reserved |
/// | `2001::/32` | Teredo |
/// | `::ffff:a.b.c.d` (mapped), `64:ff9b::a.b.c.d` (NAT64), `2002:aabb:ccdd::/48` (6to4) | the class of the embedded IPv4 address; public if it is public |
///
/// Decisions:
/// - Mapped, NAT64 and 6to4 addresses with a public embedded address are public: that is how
///   dual-stack sockets, NAT64 networks and 6to4 hosts reach ordinary IPv4 servers, and
///   refusing them would break IPv6-only deployments without making anything safer.
/// - IPv4-compatible addresses (`::a.b.c.d`, deprecated by RFC 4291) are refused whatever they
///   embed: Linux can still route them through `sit0`, and nothing legitimate uses them.
/// - Local-use NAT64 (`64:ff9b:1::/48`, RFC 8215) places the IPv4 address at an offset that
///   depends on the operator's prefix length, so it cannot be checked and is refused.
/// - Teredo (`2001::/32`) is refused outright rather than decoded: the obfuscated client
///   address it carries is reached through a relay we cannot see.
/// - Cloud metadata endpoints include `168.63.129.16` (Azure's WireServer), which sits in
///   public space: no MCP server lives there, and it is the target of SSRF on Azure.
pub fn classify(ip: IpAddr) -> Option<Blocked> {
    match ip {
        IpAddr::V4(ip) => classify_v4(ip),
        IpAddr::V6(ip) => classify_v6(ip),
    }
}

const METADATA_V4: [Ipv4Addr; 5] = [
    // AWS, GCP, Azure, OCI, OpenStack, DigitalOcean, Hetzner, ... instance metadata
    Ipv4Addr::new(169, 254, 169, 254),
    // AWS ECS task metadata and credentials
    Ipv4Addr::new(169, 254, 170, 2),
    // AWS EKS Pod Identity agent
    Ipv4Addr::new(169, 254, 170, 23),
    // Alibaba Cloud instance metadata (inside 100.64.0.0/10)
    Ipv4Addr::new(100, 100, 100, 200),
    // Azure WireServer (public space, reachable only from inside Azure)
    Ipv4Addr::new(168, 63, 129, 16),
];

const METADATA_V6: [Ipv6Addr; 3] = [
    // AWS instance metadata over IPv6
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
    // AWS EKS Pod Identity agent over IPv6
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23),
    // GCP instance metadata over IPv6
    Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254),
];

fn classify_v4(ip: Ipv4Addr) -> Option<Blocked> {
    if METADATA_V4.contains(&ip) {
        return Some(Blocked::CloudMetadata);
    }
    let [a, b, c, _] = ip.octets();
    let blocked = match (a, b, c) {
        (0, _, _) => Blocked::Unspecified,
        (127, _, _) => Blocked::Loopback,
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => Blocked::Private,
        (100, 64..=127, _) => Blocked::CarrierGradeNat,
        (169, 254, _) => Blocked::LinkLocal,
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => Blocked::Documentation,
        (198, 18..=19, _) => Blocked::Benchmarking,
        // IETF protocol assignments (DS-Lite, NAT64 discovery, ...) and the deprecated 6to4
        // relay anycast prefix (RFC 7526)
        (192, 0, 0) | (192, 88, 99) => Blocked::Reserved,
        (224..=239, _, _) => Blocked::Multicast,
        _ if ip == Ipv4Addr::BROADCAST => Blocked::Broadcast,
        (240..=255, _, _) => Blocked::Reserved,
        _ => return None,
    };
    Some(blocked)
}

fn classify_v6(ip: Ipv6Addr) -> Option<Blocked> {
    if METADATA_V6.contains(&ip) {
        return Some(Blocked::CloudMetadata);
    }
    if ip.is_unspecified() {
        return Some(Blocked::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Blocked::Loopback);
    }
    let s = ip.segments();
    let low_v4 = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    let blocked = match s {
        // IPv4-mapped ::ffff:0:0/96: the socket connects to the embedded address.
        [0, 0, 0, 0, 0, 0xffff, _, _] => return classify_v4(low_v4),
        // IPv4-compatible ::/96 (deprecated): its embedded class if that is not public,
        // reserved otherwise.
        [0, 0, 0, 0, 0, 0, _, _] => classify_v4(low_v4).unwrap_or(Blocked::Reserved),
        // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052).
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => return classify_v4(low_v4),
        // Local-use NAT64 64:ff9b:1::/48 (RFC 8215): the embedded offset is unknowable.
        [0x64, 0xff9b, 1, ..] => Blocked::Reserved,
        // 6to4 2002::/16 (RFC 3056): the IPv4 address is in segments 1 and 2.
        [0x2002, hi, lo, ..] => {
            return classify_v4(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
        }
        [0x2001, 0, ..] => Blocked::Teredo,
        [0x2001, 0xdb8, ..] => Blocked::Documentation,
        [0x3fff, 0..=0x0fff, ..] => Blocked::Documentation,
        [0x2001, 2, 0, ..] => Blocked::Benchmarking,
        // The rest of the IETF protocol assignments block 2001::/23.
        [0x2001, 0..=0x01ff, ..] => Blocked::Reserved,
        [0xff00..=0xffff, ..] => Blocked::Multicast,
        [0xfe80..=0xfebf, ..] => Blocked::LinkLocal,
        [0xfec0..=0xfeff, ..] | [0xfc00..=0xfdff, ..] => Blocked::Private,
        // Only 2000::/3 is allocated global unicast; everything else (discard-only 100::/64,
        // SRv6 5f00::/16, unallocated space) is not a server's address.
        [first, ..] if first & 0xe000 != 0x2000 => Blocked::Reserved,
        _ => return None,
    };
    Some(blocked)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row: an address, and the class it must get (`None` for public).
    #[track_caller]
    fn check(rows: &[(&str, Option<Blocked>)]) {
        let mut wrong = Vec::new();
        for &(text, expected) in rows {
            let ip: IpAddr = text.parse().expect("test addresses parse");
            let actual = classify(ip);
            if actual != expected {
                wrong.push(format!("{text}: expected {expected:?}, got {actual:?}"));
            }
        }
        assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
    }

    use Blocked::*;

    #[test]
    fn ipv4_special_ranges_are_classified() {
        check(&[
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(Unspecified)),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("10.0.0.1", Some(Private)),
            ("10.255.255.255", Some(Private)),
            ("172.15.255.255", None),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.32.0.0", None),
            ("192.168.1.1", Some(Private)),
            ("192.167.255.255", None),
            ("192.169.0.0", None),
            ("100.63.255.255", None),
            ("100.64.0.1", Some(CarrierGradeNat)),
            ("100.127.255.255", Some(CarrierGradeNat)),
            ("100.128.0.0", None),
            ("169.254.0.1", Some(LinkLocal)),
            ("169.254.169.254", Some(CloudMetadata)),
            ("169.254.170.2", Some(CloudMetadata)),
            ("169.254.170.23", Some(CloudMetadata)),
            ("169.254.169.253", Some(LinkLocal)),
            ("100.100.100.200", Some(CloudMetadata)),
            ("168.63.129.16", Some(CloudMetadata)),
            ("168.63.129.17", None),
            ("192.0.0.8", Some(Reserved)),
            ("192.0.0.170", Some(Reserved)),
            ("192.0.2.1", Some(Documentation)),
            ("198.51.100.7", Some(Documentation)),
            ("203.0.113.9", Some(Documentation)),
            ("198.18.0.1", Some(Benchmarking)),
            ("198.19.255.255", Some(Benchmarking)),
            ("198.20.0.0", None),
            ("192.88.99.1", Some(Reserved)),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.250", Some(Multicast)),
            ("240.0.0.1", Some(Reserved)),
            ("255.255.255.254", Some(Reserved)),
            ("255.255.255.255", Some(Broadcast)),
            ("1.1.1.1", None),
            ("8.8.8.8", None),
            ("93.184.215.14", None),
            ("223.255.255.255", None),
        ]);
    }

    #[test]
    fn ipv6_special_ranges_are_classified() {
        check(&[
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("fe80::1", Some(LinkLocal)),
            ("febf:ffff::1", Some(LinkLocal)),
            ("fec0::1", Some(Private)),
            ("fc00::1", Some(Private)),
            ("fd12:3456::1", Some(Private)),
            ("fd7a:115c:a1e0::1", Some(Private)),
            ("fd00:ec2::254", Some(CloudMetadata)),
            ("fd00:ec2::23", Some(CloudMetadata)),
            ("fd20:ce::254", Some(CloudMetadata)),
            ("ff02::1", Some(Multicast)),
            ("ff0e::101", Some(Multicast)),
            ("2001:db8::1", Some(Documentation)),
            ("3fff::1", Some(Documentation)),
            ("3fff:fff::1", Some(Documentation)),
            ("3fff:1000::1", None),
            ("2001:2::1", Some(Benchmarking)),
            ("2001::1", Some(Teredo)),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some(Teredo)),
            ("2001:10::1", Some(Reserved)),
            ("2001:1ff::1", Some(Reserved)),
            ("2001:200::1", None),
            ("100::1", Some(Reserved)),
            ("5f00::1", Some(Reserved)),
            ("4000::1", Some(Reserved)),
            ("64:ff9b:1::a00:1", Some(Reserved)),
            ("2606:4700:4700::1111", None),
            ("2001:4860:4860::8888", None),
            ("2a00:1450:4001::200e", None),
        ]);
    }

    #[test]
    fn ipv6_addresses_embedding_ipv4_are_judged_by_the_embedded_address() {
        check(&[
            // IPv4-mapped
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:10.1.2.3", Some(Private)),
            ("::ffff:169.254.169.254", Some(CloudMetadata)),
            ("::ffff:0.0.0.0", Some(Unspecified)),
            ("::ffff:100.64.0.1", Some(CarrierGradeNat)),
            ("::ffff:8.8.8.8", None),
            // IPv4-compatible (deprecated): refused even when the embedded address is public
            ("::127.0.0.1", Some(Loopback)),
            ("::10.0.0.1", Some(Private)),
            ("::8.8.8.8", Some(Reserved)),
            // NAT64 well-known prefix
            ("64:ff9b::127.0.0.1", Some(Loopback)),
            ("64:ff9b::192.168.0.1", Some(Private)),
            ("64:ff9b::169.254.169.254", Some(CloudMetadata)),
            ("64:ff9b::8.8.8.8", None),
            // 6to4: 2002:AABB:CCDD:: embeds AA.BB.CC.DD
            ("2002:7f00:1::", Some(Loopback)),
            ("2002:a00:1::1", Some(Private)),
            ("2002:a9fe:a9fe::1", Some(CloudMetadata)),
            ("2002:c000:0201::1", Some(Documentation)),
            ("2002:808:808::1", None),
        ]);
    }

    #[test]
    fn tiers_follow_the_documented_policy() {
        for class in [Loopback, Private, CarrierGradeNat] {
            assert!(class.is_private_network(), "{class:?}");
            assert!(!class.is_never_allowed(), "{class:?}");
        }
        for class in [
            LinkLocal,
            CloudMetadata,
            Documentation,
            Benchmarking,
            Reserved,
            Teredo,
        ] {
            assert!(!class.is_private_network(), "{class:?}");
            assert!(!class.is_never_allowed(), "{class:?}");
        }
        for class in [Unspecified, Multicast, Broadcast] {
            assert!(class.is_never_allowed(), "{class:?}");
            assert!(!class.is_private_network(), "{class:?}");
        }
    }
}
