//! GSS-API (RFC 2743, C bindings RFC 2744) over MIT Kerberos, both ways:
//! the acceptor for SASL GSSAPI clients and for members that dial this
//! one, the initiator for this member dialling the others (quorum SASL
//! with Kerberos). `stoa_core::sasl::gssapi` and `gssapi_initiator` run
//! the SASL exchanges, this module the Kerberos calls beneath them.
//!
//! MIT's `libgssapi_krb5.so.2` is loaded when a JAAS section asks for
//! Kerberos, not linked: the server builds and runs without Kerberos
//! installed, and only a server configured for it needs the library (it
//! stops at start, saying so, when the library is missing). The few
//! functions used are declared here.
//!
//! Accepting touches the local keytab and replay cache only, never the
//! KDC (the peer brings its ticket), and runs on the engine's thread.
//! Initiating asks the KDC: for this member's ticket-granting ticket when
//! its credentials are acquired (from its keytab, at start and whenever
//! MIT refreshes them) and for a service ticket per member dialled, so the
//! dialling side runs these calls off the engine's thread.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;
use std::sync::Arc;

use libloading::Library;
use stoa_core::sasl::gssapi::{Accepted, GssAcceptContext, GssAcceptor};
use stoa_core::sasl::gssapi_initiator::{GssInitContext, GssInitiator, Initiated};

/// MIT Kerberos' GSS-API library, as Debian's libgssapi-krb5-2 installs it.
pub const GSSAPI_LIBRARY: &str = "libgssapi_krb5.so.2";
/// MIT Kerberos' own library (the default realm).
const KRB5_LIBRARY: &str = "libkrb5.so.3";

#[repr(C)]
struct Buffer {
    length: usize,
    value: *mut c_void,
}

impl Buffer {
    fn empty() -> Buffer {
        Buffer {
            length: 0,
            value: std::ptr::null_mut(),
        }
    }

    /// A buffer that lends `bytes` to the library (never freed by it).
    fn lend(bytes: &[u8]) -> Buffer {
        Buffer {
            length: bytes.len(),
            value: bytes.as_ptr() as *mut c_void,
        }
    }
}

#[repr(C)]
struct Oid {
    length: u32,
    elements: *const c_void,
}

#[repr(C)]
struct OidSet {
    count: usize,
    elements: *const Oid,
}

#[repr(C)]
struct KeyValue {
    key: *const c_char,
    value: *const c_char,
}

#[repr(C)]
struct KeyValueSet {
    count: u32,
    elements: *const KeyValue,
}

type Name = *mut c_void;
type Cred = *mut c_void;
type Context = *mut c_void;

/// 1.2.840.113554.1.2.2, the Kerberos V5 mechanism.
const KRB5_MECHANISM: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02";
/// 1.2.840.113554.1.2.2.1, a Kerberos principal name.
const KRB5_PRINCIPAL_NAME: &[u8] = b"\x2a\x86\x48\x86\xf7\x12\x01\x02\x02\x01";

const GSS_C_INITIATE: c_int = 1;
const GSS_C_ACCEPT: c_int = 2;
const GSS_C_MUTUAL_FLAG: u32 = 2;
const GSS_C_INTEG_FLAG: u32 = 32;
const GSS_C_INDEFINITE: u32 = u32::MAX;
const GSS_C_GSS_CODE: c_int = 1;
const GSS_C_MECH_CODE: c_int = 2;
const GSS_S_CONTINUE_NEEDED: u32 = 1;

/// The calling and routine error fields of a major status (RFC 2744 3.9.1).
fn is_error(major: u32) -> bool {
    major & 0xffff_0000 != 0
}

type ImportName = unsafe extern "C" fn(*mut u32, *const Buffer, *const Oid, *mut Name) -> u32;
type AcquireCred = unsafe extern "C" fn(
    *mut u32,
    Name,
    u32,
    *const OidSet,
    c_int,
    *mut Cred,
    *mut c_void,
    *mut u32,
) -> u32;
type AcquireCredFrom = unsafe extern "C" fn(
    *mut u32,
    Name,
    u32,
    *const OidSet,
    c_int,
    *const KeyValueSet,
    *mut Cred,
    *mut c_void,
    *mut u32,
) -> u32;
type RegisterAcceptorIdentity = unsafe extern "C" fn(*const c_char) -> u32;
type AcceptSecContext = unsafe extern "C" fn(
    *mut u32,
    *mut Context,
    Cred,
    *const Buffer,
    *const c_void,
    *mut Name,
    *mut *const Oid,
    *mut Buffer,
    *mut u32,
    *mut u32,
    *mut Cred,
) -> u32;
type InitSecContext = unsafe extern "C" fn(
    *mut u32,
    Cred,
    *mut Context,
    Name,
    *const Oid,
    u32,
    u32,
    *const c_void,
    *const Buffer,
    *mut *const Oid,
    *mut Buffer,
    *mut u32,
    *mut u32,
) -> u32;
type DisplayName = unsafe extern "C" fn(*mut u32, Name, *mut Buffer, *mut *const Oid) -> u32;
type Wrap = unsafe extern "C" fn(
    *mut u32,
    Context,
    c_int,
    u32,
    *const Buffer,
    *mut c_int,
    *mut Buffer,
) -> u32;
type Unwrap = unsafe extern "C" fn(
    *mut u32,
    Context,
    *const Buffer,
    *mut Buffer,
    *mut c_int,
    *mut u32,
) -> u32;
type ReleaseBuffer = unsafe extern "C" fn(*mut u32, *mut Buffer) -> u32;
type ReleaseName = unsafe extern "C" fn(*mut u32, *mut Name) -> u32;
type ReleaseCred = unsafe extern "C" fn(*mut u32, *mut Cred) -> u32;
type DeleteSecContext = unsafe extern "C" fn(*mut u32, *mut Context, *mut Buffer) -> u32;
type DisplayStatus =
    unsafe extern "C" fn(*mut u32, u32, c_int, *const Oid, *mut u32, *mut Buffer) -> u32;

type Krb5InitContext = unsafe extern "C" fn(*mut *mut c_void) -> i32;
type Krb5GetDefaultRealm = unsafe extern "C" fn(*mut c_void, *mut *mut c_char) -> i32;
type Krb5FreeDefaultRealm = unsafe extern "C" fn(*mut c_void, *mut c_char);
type Krb5FreeContext = unsafe extern "C" fn(*mut c_void);

/// The GSS-API functions used, from the loaded library (kept loaded as
/// long as any of them may be called).
struct Gss {
    import_name: ImportName,
    acquire_cred: AcquireCred,
    /// MIT's credential-store extension (1.11 on): the keytab for this
    /// credential alone. Without it, the process-wide acceptor keytab.
    acquire_cred_from: Option<AcquireCredFrom>,
    register_acceptor_identity: Option<RegisterAcceptorIdentity>,
    accept_sec_context: AcceptSecContext,
    init_sec_context: InitSecContext,
    display_name: DisplayName,
    wrap: Wrap,
    unwrap: Unwrap,
    release_buffer: ReleaseBuffer,
    release_name: ReleaseName,
    release_cred: ReleaseCred,
    delete_sec_context: DeleteSecContext,
    display_status: DisplayStatus,
    _library: Library,
}

impl Gss {
    /// Loads `file` (GSSAPI_LIBRARY but in tests).
    fn load(file: &str) -> Result<Gss, String> {
        // SAFETY: loading MIT's library runs only its initialisers.
        let library = unsafe { Library::new(file) }.map_err(|e| {
            format!(
                "Kerberos (GSSAPI) needs MIT Kerberos' {file} \
                 (Debian: apt-get install libgssapi-krb5-2): {e}"
            )
        })?;
        /// A function of `library` by `name`, typed as T (the caller names
        /// its RFC 2744 / MIT C signature).
        fn get<T: Copy>(library: &Library, name: &str) -> Result<T, String> {
            // SAFETY: T is the symbol's C type, declared above.
            unsafe { library.get::<T>(name.as_bytes()) }
                .map(|symbol| *symbol)
                .map_err(|e| format!("the GSS-API library has no {name}: {e}"))
        }
        Ok(Gss {
            import_name: get(&library, "gss_import_name")?,
            acquire_cred: get(&library, "gss_acquire_cred")?,
            acquire_cred_from: get(&library, "gss_acquire_cred_from").ok(),
            register_acceptor_identity: get(&library, "krb5_gss_register_acceptor_identity").ok(),
            accept_sec_context: get(&library, "gss_accept_sec_context")?,
            init_sec_context: get(&library, "gss_init_sec_context")?,
            display_name: get(&library, "gss_display_name")?,
            wrap: get(&library, "gss_wrap")?,
            unwrap: get(&library, "gss_unwrap")?,
            release_buffer: get(&library, "gss_release_buffer")?,
            release_name: get(&library, "gss_release_name")?,
            release_cred: get(&library, "gss_release_cred")?,
            delete_sec_context: get(&library, "gss_delete_sec_context")?,
            display_status: get(&library, "gss_display_status")?,
            _library: library,
        })
    }

    /// A buffer the library filled, copied out and released.
    fn take(&self, mut buffer: Buffer) -> Vec<u8> {
        let bytes = if buffer.value.is_null() || buffer.length == 0 {
            Vec::new()
        } else {
            // SAFETY: the library filled `length` bytes at `value`.
            unsafe { std::slice::from_raw_parts(buffer.value as *const u8, buffer.length) }.to_vec()
        };
        let mut minor = 0;
        // SAFETY: a buffer the library allocated, released once.
        unsafe { (self.release_buffer)(&mut minor, &mut buffer) };
        bytes
    }

    /// What a failed call's major and minor statuses mean, in the
    /// library's words.
    fn describe(&self, what: &str, major: u32, minor: u32) -> String {
        let mut words = Vec::new();
        let mechanism = oid(KRB5_MECHANISM);
        for (code, kind) in [(major, GSS_C_GSS_CODE), (minor, GSS_C_MECH_CODE)] {
            if code == 0 {
                continue;
            }
            let mut more = 0u32;
            // Bounded: a library that never says "no more" stops here.
            for _ in 0..8 {
                let (mut m, mut text) = (0, Buffer::empty());
                // SAFETY: out-parameters of the right types.
                let status = unsafe {
                    (self.display_status)(&mut m, code, kind, &mechanism, &mut more, &mut text)
                };
                if is_error(status) {
                    break;
                }
                words.push(String::from_utf8_lossy(&self.take(text)).into_owned());
                if more == 0 {
                    break;
                }
            }
        }
        format!("{what}: {}", words.join("; "))
    }

    fn import_principal(&self, principal: &str) -> Result<Name, String> {
        let (mut minor, mut name) = (0, std::ptr::null_mut());
        let principal_type = oid(KRB5_PRINCIPAL_NAME);
        // SAFETY: the buffer lends `principal` for the call only.
        let major = unsafe {
            (self.import_name)(
                &mut minor,
                &Buffer::lend(principal.as_bytes()),
                &principal_type,
                &mut name,
            )
        };
        if is_error(major) {
            return Err(self.describe(&format!("principal {principal}"), major, minor));
        }
        Ok(name)
    }

    fn release_name(&self, mut name: Name) {
        if !name.is_null() {
            let mut minor = 0;
            // SAFETY: a name the library made, released once.
            unsafe { (self.release_name)(&mut minor, &mut name) };
        }
    }

    /// Acceptor credentials for `principal` (`*`: any key of the keytab)
    /// from `keytab`.
    fn acquire(&self, principal: &str, keytab: &Path) -> Result<Cred, String> {
        let keytab_text = CString::new(keytab.as_os_str().as_encoded_bytes())
            .map_err(|_| "a keyTab path with a NUL byte".to_string())?;
        let name = match principal {
            "*" => std::ptr::null_mut(),
            _ => self.import_principal(principal)?,
        };
        let mechanism = oid(KRB5_MECHANISM);
        let mechanisms = OidSet {
            count: 1,
            elements: &mechanism,
        };
        let (mut minor, mut cred) = (0, std::ptr::null_mut());
        let major = match (self.acquire_cred_from, self.register_acceptor_identity) {
            (Some(acquire_cred_from), _) => {
                let key = c"keytab";
                let store = [KeyValue {
                    key: key.as_ptr(),
                    value: keytab_text.as_ptr(),
                }];
                let store = KeyValueSet {
                    count: 1,
                    elements: store.as_ptr(),
                };
                // SAFETY: every pointer outlives the call; out-parameters
                // of the right types.
                unsafe {
                    acquire_cred_from(
                        &mut minor,
                        name,
                        GSS_C_INDEFINITE,
                        &mechanisms,
                        GSS_C_ACCEPT,
                        &store,
                        &mut cred,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                }
            }
            (None, Some(register)) => {
                // SAFETY: a NUL-terminated path; then as above.
                unsafe {
                    register(keytab_text.as_ptr());
                    (self.acquire_cred)(
                        &mut minor,
                        name,
                        GSS_C_INDEFINITE,
                        &mechanisms,
                        GSS_C_ACCEPT,
                        &mut cred,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                }
            }
            (None, None) => {
                self.release_name(name);
                return Err(format!(
                    "{GSSAPI_LIBRARY} can neither acquire credentials from a keytab \
                     (gss_acquire_cred_from) nor register one: is it MIT Kerberos?"
                ));
            }
        };
        self.release_name(name);
        if is_error(major) {
            return Err(self.describe(
                &format!(
                    "credentials of {principal} from keyTab {}",
                    keytab.display()
                ),
                major,
                minor,
            ));
        }
        Ok(cred)
    }

    /// Initiator credentials of `principal`, its key from `keytab`
    /// (MIT's `client_keytab`, 1.11 on): MIT asks the KDC for the
    /// principal's ticket-granting ticket now, which proves the key, and
    /// again before it expires. The tickets stay in this process's memory,
    /// never in a ticket cache another process reads.
    fn acquire_initiator(&self, principal: &str, keytab: &Path) -> Result<Cred, String> {
        let Some(acquire_cred_from) = self.acquire_cred_from else {
            return Err(format!(
                "{GSSAPI_LIBRARY} cannot acquire credentials from a client keytab \
                 (no gss_acquire_cred_from): is it MIT Kerberos 1.11 or later?"
            ));
        };
        let keytab_text = CString::new(keytab.as_os_str().as_encoded_bytes())
            .map_err(|_| "a keyTab path with a NUL byte".to_string())?;
        let ccache_name = initiator_ccache(principal)?;
        let name = self.import_principal(principal)?;
        let mechanism = oid(KRB5_MECHANISM);
        let mechanisms = OidSet {
            count: 1,
            elements: &mechanism,
        };
        let (client_keytab, ccache) = (c"client_keytab", c"ccache");
        let store = [
            KeyValue {
                key: client_keytab.as_ptr(),
                value: keytab_text.as_ptr(),
            },
            KeyValue {
                key: ccache.as_ptr(),
                value: ccache_name.as_ptr(),
            },
        ];
        let store = KeyValueSet {
            count: store.len() as u32,
            elements: store.as_ptr(),
        };
        let (mut minor, mut cred) = (0, std::ptr::null_mut());
        // SAFETY: every pointer outlives the call; out-parameters of the
        // right types.
        let major = unsafe {
            acquire_cred_from(
                &mut minor,
                name,
                GSS_C_INDEFINITE,
                &mechanisms,
                GSS_C_INITIATE,
                &store,
                &mut cred,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        self.release_name(name);
        if is_error(major) {
            return Err(self.describe(
                &format!(
                    "a ticket for {principal} with its key from keyTab {}",
                    keytab.display()
                ),
                major,
                minor,
            ));
        }
        Ok(cred)
    }

    /// `gss_wrap` on an established context, integrity only (conf_req_flag
    /// 0), the default protection.
    fn wrap(&self, context: Context, message: &[u8]) -> Result<Vec<u8>, String> {
        let (mut minor, mut wrapped) = (0, Buffer::empty());
        // SAFETY: the message is lent for the call; out-parameters of the
        // right types.
        let major = unsafe {
            (self.wrap)(
                &mut minor,
                context,
                0,
                0,
                &Buffer::lend(message),
                std::ptr::null_mut(),
                &mut wrapped,
            )
        };
        let wrapped = self.take(wrapped);
        if is_error(major) {
            return Err(self.describe("gss_wrap", major, minor));
        }
        Ok(wrapped)
    }

    /// `gss_unwrap` on an established context.
    fn unwrap(&self, context: Context, token: &[u8]) -> Result<Vec<u8>, String> {
        let (mut minor, mut message) = (0, Buffer::empty());
        // SAFETY: as in wrap.
        let major = unsafe {
            (self.unwrap)(
                &mut minor,
                context,
                &Buffer::lend(token),
                &mut message,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        let message = self.take(message);
        if is_error(major) {
            return Err(self.describe("gss_unwrap", major, minor));
        }
        Ok(message)
    }

    fn delete_context(&self, context: &mut Context) {
        if !context.is_null() {
            let mut minor = 0;
            // SAFETY: a context the library made, deleted once; no output
            // token wanted.
            unsafe { (self.delete_sec_context)(&mut minor, context, std::ptr::null_mut()) };
        }
    }
}

/// Where `principal`'s tickets live when this process initiates: its own
/// memory (MIT's MEMORY ccache), one cache per principal, so members
/// sharing a machine share no tickets.
fn initiator_ccache(principal: &str) -> Result<CString, String> {
    CString::new(format!("MEMORY:stoa-initiator-{principal}"))
        .map_err(|_| "a principal with a NUL byte".to_string())
}

fn oid(bytes: &'static [u8]) -> Oid {
    Oid {
        length: bytes.len() as u32,
        elements: bytes.as_ptr() as *const c_void,
    }
}

/// Acceptor credentials (a keytab's key) or initiator ones (a
/// principal's tickets), shared by every connection's context and
/// released after the last.
struct Credential {
    gss: Arc<Gss>,
    cred: Cred,
}

// SAFETY: MIT's GSS-API is thread-safe; its credential handle carries its
// own lock (the acceptor's is used from the engine's thread only; the
// initiator's from the blocking threads of dials that may overlap, and
// MIT refreshes its tickets under that lock).
unsafe impl Send for Credential {}
unsafe impl Sync for Credential {}

impl Drop for Credential {
    fn drop(&mut self) {
        let mut minor = 0;
        // SAFETY: the credential acquired once, released once.
        unsafe { (self.gss.release_cred)(&mut minor, &mut self.cred) };
    }
}

/// Makes a Kerberos security context for each SASL GSSAPI exchange.
pub struct KerberosAcceptor {
    credential: Arc<Credential>,
}

impl KerberosAcceptor {
    /// Loads MIT Kerberos and acquires `principal`'s key from `keytab`,
    /// as ZooKeeper's server logs in with its JAAS Krb5LoginModule.
    pub fn new(principal: &str, keytab: &Path) -> Result<KerberosAcceptor, String> {
        let gss = Arc::new(Gss::load(GSSAPI_LIBRARY)?);
        let cred = gss.acquire(principal, keytab)?;
        Ok(KerberosAcceptor {
            credential: Arc::new(Credential { gss, cred }),
        })
    }
}

impl GssAcceptor for KerberosAcceptor {
    fn new_context(&self) -> Result<Box<dyn GssAcceptContext>, String> {
        Ok(Box::new(KerberosContext {
            credential: self.credential.clone(),
            context: std::ptr::null_mut(),
        }))
    }
}

/// One connection's security context.
struct KerberosContext {
    credential: Arc<Credential>,
    context: Context,
}

// SAFETY: a context is used by one thread at a time (its connection's
// engine); MIT's contexts may move between threads.
unsafe impl Send for KerberosContext {}

impl KerberosContext {
    fn initiator(&self, name: Name) -> Result<String, String> {
        let (mut minor, mut text) = (0, Buffer::empty());
        // SAFETY: a name the library gave; out-parameters of the right types.
        let major = unsafe {
            (self.credential.gss.display_name)(&mut minor, name, &mut text, std::ptr::null_mut())
        };
        self.credential.gss.release_name(name);
        if is_error(major) {
            return Err(self
                .credential
                .gss
                .describe("gss_display_name", major, minor));
        }
        String::from_utf8(self.credential.gss.take(text))
            .map_err(|_| "an initiator name that is not UTF-8".to_string())
    }
}

impl GssAcceptContext for KerberosContext {
    fn accept(&mut self, token: &[u8]) -> Result<Accepted, String> {
        let (mut minor, mut source) = (0, std::ptr::null_mut());
        let mut reply = Buffer::empty();
        // SAFETY: the token is lent for the call; out-parameters of the
        // right types; no channel bindings, mechanism, flags, time or
        // delegated credential asked for.
        let major = unsafe {
            (self.credential.gss.accept_sec_context)(
                &mut minor,
                &mut self.context,
                self.credential.cred,
                &Buffer::lend(token),
                std::ptr::null(),
                &mut source,
                std::ptr::null_mut(),
                &mut reply,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        let reply = self.credential.gss.take(reply);
        if is_error(major) {
            self.credential.gss.release_name(source);
            return Err(self
                .credential
                .gss
                .describe("gss_accept_sec_context", major, minor));
        }
        if major & GSS_S_CONTINUE_NEEDED != 0 {
            self.credential.gss.release_name(source);
            return Ok(Accepted::ContinueNeeded(reply));
        }
        let initiator = self.initiator(source)?;
        Ok(Accepted::Complete { reply, initiator })
    }

    fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, String> {
        self.credential.gss.wrap(self.context, message)
    }

    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, String> {
        self.credential.gss.unwrap(self.context, token)
    }
}

impl Drop for KerberosContext {
    fn drop(&mut self) {
        self.credential.gss.delete_context(&mut self.context);
    }
}

/// This member's credentials as an initiator: a ticket-granting ticket
/// for its principal, from its keytab, as ZooKeeper's learner logs in
/// with its JAAS Krb5LoginModule.
pub struct KerberosInitiator {
    credential: Arc<Credential>,
    principal: String,
}

impl KerberosInitiator {
    /// Loads MIT Kerberos and gets `principal`'s ticket-granting ticket
    /// with its key from `keytab`: an error (the library's words) when
    /// the library is missing, the keytab lacks the principal or its key
    /// is not the KDC's.
    pub fn new(principal: &str, keytab: &Path) -> Result<KerberosInitiator, String> {
        let gss = Arc::new(Gss::load(GSSAPI_LIBRARY)?);
        let cred = gss.acquire_initiator(principal, keytab)?;
        Ok(KerberosInitiator {
            credential: Arc::new(Credential { gss, cred }),
            principal: principal.to_string(),
        })
    }
}

impl GssInitiator for KerberosInitiator {
    fn principal(&self) -> &str {
        &self.principal
    }

    /// A security context toward `target` (a principal,
    /// `service/host@REALM`), asking for mutual authentication.
    fn new_context(&self, target: &str) -> Result<Box<dyn GssInitContext>, String> {
        let target = self.credential.gss.import_principal(target)?;
        Ok(Box::new(KerberosInitContext {
            credential: self.credential.clone(),
            target,
            context: std::ptr::null_mut(),
        }))
    }
}

/// One dial's security context toward one member.
struct KerberosInitContext {
    credential: Arc<Credential>,
    target: Name,
    context: Context,
}

// SAFETY: a context is used by one thread at a time (the dial's blocking
// task); MIT's contexts and names may move between threads.
unsafe impl Send for KerberosInitContext {}

impl GssInitContext for KerberosInitContext {
    fn init(&mut self, token: &[u8]) -> Result<Initiated, String> {
        let gss = &self.credential.gss;
        let mut minor = 0;
        let mut output = Buffer::empty();
        let input = Buffer::lend(token);
        // The first call has no token (GSS_C_NO_BUFFER).
        let input: *const Buffer = if token.is_empty() {
            std::ptr::null()
        } else {
            &input
        };
        let mechanism = oid(KRB5_MECHANISM);
        // SAFETY: the token is lent for the call; out-parameters of the
        // right types; no channel bindings, actual mechanism, flags or
        // time wanted back.
        let major = unsafe {
            (gss.init_sec_context)(
                &mut minor,
                self.credential.cred,
                &mut self.context,
                self.target,
                &mechanism,
                GSS_C_MUTUAL_FLAG | GSS_C_INTEG_FLAG,
                0,
                std::ptr::null(),
                input,
                std::ptr::null_mut(),
                &mut output,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        let output = gss.take(output);
        if is_error(major) {
            return Err(gss.describe("gss_init_sec_context", major, minor));
        }
        Ok(if major & GSS_S_CONTINUE_NEEDED != 0 {
            Initiated::ContinueNeeded(output)
        } else {
            Initiated::Complete(output)
        })
    }

    fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, String> {
        self.credential.gss.wrap(self.context, message)
    }

    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, String> {
        self.credential.gss.unwrap(self.context, token)
    }
}

impl Drop for KerberosInitContext {
    fn drop(&mut self) {
        self.credential.gss.delete_context(&mut self.context);
        self.credential.gss.release_name(self.target);
    }
}

/// The Kerberos library's default realm (krb5.conf `default_realm`), which
/// ZooKeeper's name rules shorten principals of; none when unset.
pub fn default_realm() -> Option<String> {
    // SAFETY: MIT's libkrb5 (loaded with libgssapi_krb5 anyway), its
    // documented calls, each allocation freed by its own function.
    unsafe {
        let library = Library::new(KRB5_LIBRARY).ok()?;
        let init: libloading::Symbol<Krb5InitContext> = library.get(b"krb5_init_context").ok()?;
        let get: libloading::Symbol<Krb5GetDefaultRealm> =
            library.get(b"krb5_get_default_realm").ok()?;
        let free_realm: libloading::Symbol<Krb5FreeDefaultRealm> =
            library.get(b"krb5_free_default_realm").ok()?;
        let free_context: libloading::Symbol<Krb5FreeContext> =
            library.get(b"krb5_free_context").ok()?;
        let mut context = std::ptr::null_mut();
        if init(&mut context) != 0 {
            return None;
        }
        let mut realm = std::ptr::null_mut();
        let found = if get(context, &mut realm) == 0 && !realm.is_null() {
            let text = std::ffi::CStr::from_ptr(realm)
                .to_string_lossy()
                .into_owned();
            free_realm(context, realm);
            Some(text)
        } else {
            None
        };
        free_context(context);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_named_with_the_package_that_brings_it() {
        let Err(e) = Gss::load("libgssapi_krb5.so.0-not-there") else {
            panic!("loaded a library that is not there");
        };
        assert!(
            e.contains("needs MIT Kerberos' libgssapi_krb5.so.0-not-there")
                && e.contains("libgssapi-krb5-2"),
            "{e}"
        );
    }

    /// Where MIT Kerberos is installed (the test machines): a keytab that
    /// is not there stops the acceptor, naming the keytab and principal.
    #[test]
    fn a_keytab_that_is_not_there_is_named() {
        if Gss::load(GSSAPI_LIBRARY).is_err() {
            eprintln!("{GSSAPI_LIBRARY} not installed: nothing to check");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let keytab = dir.path().join("absent.keytab");
        let Err(e) = KerberosAcceptor::new("zookeeper/localhost@EXAMPLE.COM", &keytab) else {
            panic!("credentials from a keytab that is not there");
        };
        let want = format!(
            "credentials of zookeeper/localhost@EXAMPLE.COM from keyTab {}",
            keytab.display()
        );
        assert!(e.starts_with(&want), "{e}");
    }
}
