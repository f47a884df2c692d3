//! The table's columns and sort directions: the words the table, the sort keys and the
//! ordering share.

/// Table columns, in display order. Sorting works on every one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Column {
    Flag,
    Container,
    Process,
    Local,
    Remote,
    Cc,
    CaState,
    Cwnd,
    Ssthresh,
    Rtt,
    MinRtt,
    Delivery,
    Throughput,
    Retrans,
    LimitedBy,
}

impl Column {
    pub const ALL: [Column; 15] = [
        Self::Flag,
        Self::Container,
        Self::Process,
        Self::Local,
        Self::Remote,
        Self::Cc,
        Self::CaState,
        Self::Cwnd,
        Self::Ssthresh,
        Self::Rtt,
        Self::MinRtt,
        Self::Delivery,
        Self::Throughput,
        Self::Retrans,
        Self::LimitedBy,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Self::Flag => "!",
            Self::Container => "container",
            Self::Process => "proc",
            Self::Local => "local",
            Self::Remote => "remote",
            Self::Cc => "cc",
            Self::CaState => "ca",
            Self::Cwnd => "cwnd",
            Self::Ssthresh => "ssth",
            Self::Rtt => "rtt",
            Self::MinRtt => "min",
            Self::Delivery => "deliv",
            Self::Throughput => "thpt",
            Self::Retrans => "retr",
            Self::LimitedBy => "limited",
        }
    }

    /// Numbers read best largest first, names alphabetically.
    pub fn natural_dir(self) -> SortDir {
        match self {
            Self::Container | Self::Process | Self::Local | Self::Remote | Self::Cc | Self::LimitedBy => SortDir::Asc,
            _ => SortDir::Desc,
        }
    }

    pub fn next(self) -> Self {
        let i = Self::ALL.iter().position(|c| *c == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortDir {
    Asc,
    Desc,
}

impl SortDir {
    pub fn reversed(self) -> Self {
        match self {
            Self::Asc => Self::Desc,
            Self::Desc => Self::Asc,
        }
    }

    pub fn arrow(self) -> &'static str {
        match self {
            Self::Asc => "▲",
            Self::Desc => "▼",
        }
    }
}
