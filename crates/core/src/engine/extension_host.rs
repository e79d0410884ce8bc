//! The extension host: the registered extensions (`stoa_ext`) and how many
//! of each kind there are, so the request and apply paths skip a kind with
//! none registered at no cost. It owns no tree and no raft: the engine
//! hands it a view of the state and proposes what the extensions write.

use stoa_ext::{ExtError, ExtMetrics, ExtensionKind, ExtensionManager, Limits};

pub(crate) struct ExtensionHost {
    manager: ExtensionManager,
    /// Registered extensions of each kind; kept equal to a count over
    /// `manager` by `recount` after every change.
    node: usize,
    watch: usize,
    session: usize,
}

impl ExtensionHost {
    pub fn new() -> ExtensionHost {
        ExtensionHost {
            manager: ExtensionManager::new(Limits::default()),
            node: 0,
            watch: 0,
            session: 0,
        }
    }

    /// Forgets every extension (the tree they were registered in was
    /// replaced).
    pub fn clear(&mut self) {
        *self = ExtensionHost::new();
    }

    /// Loads a registration: `declaration` is the registration node's data.
    pub fn register(&mut self, name: &str, declaration: &[u8]) -> Result<(), ExtError> {
        let registered = self
            .manager
            .parse(name, declaration)
            .and_then(|spec| self.manager.register(spec));
        self.recount();
        registered
    }

    /// Whether an extension of that name was registered.
    pub fn unregister(&mut self, name: &str) -> bool {
        let was = self.manager.unregister(name);
        self.recount();
        was
    }

    /// The leader's check of a registration before it is proposed: the
    /// declaration parses and its source compiles.
    /// Checks a registration; returns its kind, with the path the
    /// extension would own or watch if it names one.
    pub fn check(
        &self,
        name: &str,
        declaration: &[u8],
    ) -> Result<(stoa_ext::ExtensionKind, Option<String>), ExtError> {
        let spec = self.manager.parse(name, declaration)?;
        self.manager.check(&spec)?;
        Ok((spec.kind, spec.path))
    }

    pub fn has_node_extensions(&self) -> bool {
        self.node > 0
    }

    pub fn has_watch_extensions(&self) -> bool {
        self.watch > 0
    }

    pub fn has_session_extensions(&self) -> bool {
        self.session > 0
    }

    /// The paths node extensions are registered at.
    pub fn node_extension_paths(&self) -> impl Iterator<Item = &str> {
        self.manager.node_extension_paths()
    }

    /// The node extension whose subtree holds `path`.
    pub fn node_extension_for(&self, path: &str) -> Option<String> {
        if self.node == 0 {
            return None;
        }
        self.manager.node_extension_for(path)
    }

    /// The extensions themselves, to run one.
    pub fn manager_mut(&mut self) -> &mut ExtensionManager {
        &mut self.manager
    }

    pub fn metrics(&self) -> Vec<(String, ExtMetrics)> {
        self.manager.metrics()
    }

    fn recount(&mut self) {
        let names = self.manager.names();
        let count = |kind: ExtensionKind| {
            names
                .iter()
                .filter(|n| self.manager.spec(n).is_some_and(|s| s.kind == kind))
                .count()
        };
        (self.node, self.watch, self.session) = (
            count(ExtensionKind::Node),
            count(ExtensionKind::Watch),
            count(ExtensionKind::Session),
        );
    }
}
