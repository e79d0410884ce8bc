//! Operation codes, special xids and the small enumerations of the client
//! API (`ZooDefs`, `CreateMode`, `Watcher.Event`, `Watcher.WatcherType`).

macro_rules! int_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $value:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum $name {
            $($variant = $value,)*
        }

        impl $name {
            /// All values, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            pub fn from_i32(value: i32) -> Option<Self> {
                match value {
                    $($value => Some($name::$variant),)*
                    _ => None,
                }
            }

            pub fn as_i32(self) -> i32 {
                self as i32
            }
        }
    };
}

int_enum! {
    /// `ZooDefs.OpCode`: the `type` of a `RequestHeader` and `MultiHeader`.
    OpCode {
        Notification = 0,
        Create = 1,
        Delete = 2,
        Exists = 3,
        GetData = 4,
        SetData = 5,
        GetAcl = 6,
        SetAcl = 7,
        GetChildren = 8,
        Sync = 9,
        Ping = 11,
        GetChildren2 = 12,
        Check = 13,
        Multi = 14,
        Create2 = 15,
        Reconfig = 16,
        CheckWatches = 17,
        RemoveWatches = 18,
        CreateContainer = 19,
        DeleteContainer = 20,
        CreateTtl = 21,
        MultiRead = 22,
        Auth = 100,
        SetWatches = 101,
        Sasl = 102,
        GetEphemerals = 103,
        GetAllChildrenNumber = 104,
        SetWatches2 = 105,
        AddWatch = 106,
        WhoAmI = 107,
        CreateSession = -10,
        CloseSession = -11,
        Error = -1,
    }
}

/// xid of a watch notification sent by the server.
pub const NOTIFICATION_XID: i32 = -1;
/// xid of a ping and of its reply.
pub const PING_XID: i32 = -2;
/// xid of an `AuthPacket` and of its reply.
pub const AUTH_XID: i32 = -4;
/// xid of a `SetWatches`/`SetWatches2` request and of its reply.
pub const SET_WATCHES_XID: i32 = -8;

int_enum! {
    /// `CreateMode`, as the `flags` of a create request.
    CreateMode {
        Persistent = 0,
        Ephemeral = 1,
        PersistentSequential = 2,
        EphemeralSequential = 3,
        Container = 4,
        PersistentWithTtl = 5,
        PersistentSequentialWithTtl = 6,
    }
}

impl CreateMode {
    pub fn from_flags(flags: i32) -> Option<Self> {
        Self::from_i32(flags)
    }

    pub fn flags(self) -> i32 {
        self.as_i32()
    }

    pub fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }

    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl
        )
    }

    pub fn is_container(self) -> bool {
        self == CreateMode::Container
    }

    pub fn is_ttl(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentWithTtl | CreateMode::PersistentSequentialWithTtl
        )
    }
}

/// `ZooDefs.Perms`: the bits of `Acl.perms`.
pub mod perms {
    pub const READ: i32 = 1;
    pub const WRITE: i32 = 1 << 1;
    pub const CREATE: i32 = 1 << 2;
    pub const DELETE: i32 = 1 << 3;
    pub const ADMIN: i32 = 1 << 4;
    pub const ALL: i32 = READ | WRITE | CREATE | DELETE | ADMIN;
}

int_enum! {
    /// `Watcher.Event.EventType`: `WatcherEvent.kind`.
    EventType {
        None = -1,
        NodeCreated = 1,
        NodeDeleted = 2,
        NodeDataChanged = 3,
        NodeChildrenChanged = 4,
        DataWatchRemoved = 5,
        ChildWatchRemoved = 6,
        PersistentWatchRemoved = 7,
    }
}

int_enum! {
    /// `Watcher.Event.KeeperState`: `WatcherEvent.state`. `Unknown` and
    /// `NoSyncConnected` are deprecated in ZooKeeper and never sent.
    KeeperState {
        Unknown = -1,
        Disconnected = 0,
        NoSyncConnected = 1,
        SyncConnected = 3,
        AuthFailed = 4,
        ConnectedReadOnly = 5,
        SaslAuthenticated = 6,
        Expired = -112,
        Closed = 7,
    }
}

int_enum! {
    /// `Watcher.WatcherType`: the `kind` of `CheckWatchesRequest` and
    /// `RemoveWatchesRequest`.
    WatcherType {
        Children = 1,
        Data = 2,
        Any = 3,
        Persistent = 4,
        PersistentRecursive = 5,
    }
}

int_enum! {
    /// `ZooDefs.AddWatchModes`: `AddWatchRequest.mode`.
    AddWatchMode {
        Persistent = 0,
        PersistentRecursive = 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enumerations_round_trip_through_their_integers() {
        for &op in OpCode::ALL {
            assert_eq!(OpCode::from_i32(op.as_i32()), Some(op));
        }
        for &mode in CreateMode::ALL {
            assert_eq!(CreateMode::from_flags(mode.flags()), Some(mode));
        }
        assert_eq!(CreateMode::from_flags(7), None);
        assert_eq!(OpCode::from_i32(10), None);
        assert_eq!(perms::ALL, 31);
    }

    #[test]
    fn create_mode_helpers_match_zookeeper_create_mode() {
        use CreateMode::*;
        let expected = [
            // (mode, ephemeral, sequential, container, ttl)
            (Persistent, false, false, false, false),
            (Ephemeral, true, false, false, false),
            (PersistentSequential, false, true, false, false),
            (EphemeralSequential, true, true, false, false),
            (Container, false, false, true, false),
            (PersistentWithTtl, false, false, false, true),
            (PersistentSequentialWithTtl, false, true, false, true),
        ];
        for (mode, ephemeral, sequential, container, ttl) in expected {
            assert_eq!(mode.is_ephemeral(), ephemeral, "{mode:?}");
            assert_eq!(mode.is_sequential(), sequential, "{mode:?}");
            assert_eq!(mode.is_container(), container, "{mode:?}");
            assert_eq!(mode.is_ttl(), ttl, "{mode:?}");
        }
    }
}
