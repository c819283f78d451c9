//! Operator mode (`serve --kubernetes`): the Catalog comes from the Akritas custom
//! resources (validated exactly as in standalone mode), secrets from Kubernetes
//! Secrets, and every object's status is written back.

pub mod leader;
pub mod projection;
pub mod secrets;
pub mod source;
pub mod status;
