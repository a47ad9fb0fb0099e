//! The compute threads' wait settings (`edgecloud::local::wait`): libgomp
//! reads them once, at process start, so when the user set neither
//! `OMP_WAIT_POLICY` nor `GOMP_SPINCOUNT`, the command re-executes itself
//! once with edgecloud's default set (same program, arguments, PID and
//! standard streams). Their own settings always win.

use edgecloud::local::wait::{recommended_env, REEXEC_MARK_VAR};

/// Re-executes the process with the default wait settings when they are
/// not in place; returns only when nothing needed doing or the exec failed
/// (the command then runs with libgomp's own default, which `doctor`
/// shows).
pub(crate) fn ensure_default() {
    if std::env::var_os(REEXEC_MARK_VAR).is_some() {
        return;
    }
    let env = recommended_env();
    if env.is_empty() {
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut args = std::env::args_os();
        let mut cmd = std::process::Command::new(exe);
        if let Some(arg0) = args.next() {
            cmd.arg0(arg0);
        }
        cmd.args(args).envs(env).env(REEXEC_MARK_VAR, "1");
        // `exec` returns only on failure: go on as we are.
        let _ = cmd.exec();
    }
}
