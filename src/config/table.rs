//! The macro that turns the settings table of `mod.rs` into [`super::Settings`], its
//! defaults, its origins and its `serve` flags.

/// What a bad value of a setting is told it should be: its `expect` text, or the range it declares.
macro_rules! setting_expect {
    ($expect:literal ;) => {
        $expect
    };
    (; $rt:ident $lo:literal $hi:literal) => {
        concat!("an integer from ", stringify!($lo), " to ", stringify!($hi))
    };
}

/// The check of a setting: its `check`, or the range it declares.
macro_rules! setting_check {
    ($check:expr ;) => {
        $check
    };
    (; u32 $lo:literal $hi:literal) => {
        value::u32_in::<$lo, $hi>
    };
    (; u64 $lo:literal $hi:literal) => {
        value::u64_in::<$lo, $hi>
    };
}

/// The description of a setting in its flag's help: its doc line, and the range it declares.
macro_rules! setting_about {
    ($doc:expr ;) => {
        $doc
    };
    ($doc:expr ; $rt:ident $lo:literal $hi:literal) => {
        concat!($doc, ", ", stringify!($lo), "-", stringify!($hi))
    };
}

macro_rules! settings_table {
    ($(
        $(#[doc = $doc:literal])*
        $key:ident : $ty:ty = $default:expr ;
            flag $flag:literal [$($fty:tt)*] $(value_name $vn:literal)? $(delimiter $delim:literal)? ;
            $(expect $expect:literal ;)?
            $(range $rt:ident $lo:literal ..= $hi:literal ;)?
            $(check $check:expr ;)?
            section $section:literal ;
    )*) => {
        /// Resolved service settings. Use [`Settings::origin`] to learn where
        /// each value came from.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Settings {
            $( $(#[doc = $doc])* pub $key: $ty, )*
            /// The config file that was read, if any (as given).
            pub config_file: Option<PathBuf>,
            /// Source of every non-default setting, by key.
            pub origins: BTreeMap<&'static str, Source>,
            /// One warning per setting the config file still gives at its top level, naming
            /// the section it moved to.
            pub deprecated: Vec<String>,
        }

        impl Default for Settings {
            fn default() -> Self {
                Settings {
                    $( $key: $default, )*
                    config_file: None,
                    origins: BTreeMap::new(),
                    deprecated: Vec::new(),
                }
            }
        }

        /// All setting keys (snake case, as in the config file).
        pub const KEYS: &[&str] = &[$(stringify!($key)),*];

        /// The config file section of setting `key` (`max_tokens` is in `budget`).
        pub fn section_of(key: &str) -> Option<&'static str> {
            match key {
                $( stringify!($key) => Some($section), )*
                _ => None,
            }
        }

        /// The command-line flag for setting `key` (e.g. `--max-tokens`).
        pub fn flag_name(key: &str) -> Option<&'static str> {
            match key {
                $( stringify!($key) => Some(concat!("--", $flag)), )*
                _ => None,
            }
        }

        /// The help line of setting `key`'s flag as `akritas serve --help` prints it:
        /// description, environment variable and built-in default (empty for an unknown key).
        pub(crate) fn flag_help_for(key: &str) -> String {
            match key {
                $( stringify!($key) => flag_help(
                    setting_about!(concat!($($doc),*) ; $($rt $lo $hi)?),
                    &env_var_name(stringify!($key)),
                    &SettingValue::to_text(&Settings::default().$key),
                ), )*
                _ => String::new(),
            }
        }

        /// `akritas serve` flags. Each flag overrides its `AKRITAS_*`
        /// environment variable, the config file and the default; an absent
        /// flag leaves the lower layers in effect. The help of each names its
        /// variable and shows the built-in default (clap's own `env` and
        /// `default_value` would hide which layer a value came from).
        #[derive(clap::Args, Debug, Default, Clone)]
        pub struct ServeFlags {
            /// Strict JSON config file
            #[arg(long, value_name = "PATH", help = config_flag_help())]
            pub config: Option<PathBuf>,
            $(
                $(#[doc = $doc])*
                #[arg(
                    long = $flag
                    $(, value_name = $vn)?
                    $(, value_delimiter = $delim)?,
                    help = flag_help_for(stringify!($key))
                )]
                pub $key: $($fty)*,
            )*
        }

        fn apply_file(
            s: &mut Settings,
            path: &Path,
            entries: &[file::Entry],
        ) -> Result<(), ConfigError> {
            for file::Entry { key, value: raw, pointer: ptr } in entries {
                match key.as_str() {
                    $( stringify!($key) => {
                        let v = <$ty as SettingValue>::from_json(raw, setting_expect!($($expect)? ; $($rt $lo $hi)?))
                            .and_then(|v| (setting_check!($($check)? ; $($rt $lo $hi)?))(v, setting_expect!($($expect)? ; $($rt $lo $hi)?)).map_err(|p| {
                                value::JsonErr::new(format!("{p}, got {}", value::show(raw)))
                            }))
                            .map_err(|e| ConfigError::InvalidFile {
                                path: path.to_path_buf(),
                                pointer: format!("{ptr}{}", e.suffix),
                                problem: e.problem,
                            })?;
                        s.$key = v;
                        s.origins.insert(
                            stringify!($key),
                            Source::File(path.to_path_buf(), ptr.clone()),
                        );
                    } )*
                    _ => {}
                }
            }
            Ok(())
        }

        fn apply_env(
            s: &mut Settings,
            env: &dyn Fn(&str) -> Option<String>,
        ) -> Result<(), ConfigError> {
            $(
                let var = env_var_name(stringify!($key));
                if let Some(text) = env(&var) {
                    let v = <$ty as SettingValue>::from_text(&text, setting_expect!($($expect)? ; $($rt $lo $hi)?))
                        .and_then(|v| (setting_check!($($check)? ; $($rt $lo $hi)?))(v, setting_expect!($($expect)? ; $($rt $lo $hi)?)))
                        .map_err(|problem| ConfigError::InvalidEnv {
                            var: var.clone(),
                            value: text.clone(),
                            problem,
                        })?;
                    s.$key = v;
                    s.origins.insert(stringify!($key), Source::Env(var));
                }
            )*
            Ok(())
        }

        fn apply_flags(s: &mut Settings, flags: &ServeFlags) -> Result<(), ConfigError> {
            $(
                let flag = concat!("--", $flag);
                if let Some(parsed) = flags.$key.parse::<$ty>(setting_expect!($($expect)? ; $($rt $lo $hi)?)) {
                    let v = parsed
                        .and_then(|v| (setting_check!($($check)? ; $($rt $lo $hi)?))(v, setting_expect!($($expect)? ; $($rt $lo $hi)?)).map_err(|p| (flags.$key.shown(), p)))
                        .map_err(|(value, problem)| ConfigError::InvalidFlag {
                            flag: flag.to_string(),
                            value,
                            problem,
                        })?;
                    s.$key = v;
                    s.origins.insert(stringify!($key), Source::Flag(flag.to_string()));
                }
            )*
            Ok(())
        }
    };
}
