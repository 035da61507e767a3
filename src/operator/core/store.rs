//! Where resources live and their status goes: the Kubernetes API (`controller::KubeStore`)
//! or a directory of manifests (`local::LocalStore`). One set of methods for every kind.

use std::future::Future;

use super::error::OperatorError;
use super::kind::Kind;
use crate::operator::crd::JobStatus;
use crate::operator::status::Note;

pub trait Store: Send + Sync + 'static {
    /// Writes a resource's status. With `expect`, only if it is still at that
    /// resourceVersion (a 409 conflict otherwise). Returns the new resourceVersion (`None`
    /// where the store has none).
    fn patch_status<K: Kind>(
        &self,
        obj: &K,
        status: &JobStatus,
        expect: Option<&str>,
    ) -> impl Future<Output = Result<Option<String>, OperatorError>> + Send;
    /// The resource as stored now (`None`: deleted).
    fn get<K: Kind>(
        &self,
        obj: &K,
    ) -> impl Future<Output = Result<Option<K>, OperatorError>> + Send;
    fn delete<K: Kind>(&self, obj: &K) -> impl Future<Output = Result<(), OperatorError>> + Send;
    /// Publishes an Event about `obj` (failures are logged, never fatal).
    fn event<K: Kind>(&self, obj: &K, note: &Note) -> impl Future<Output = ()> + Send;
}
