/** fa-device-sdk: the device side of the federated analytics service for browsers and Node (WebCrypto), speaking the
 * same wire protocol as the Python SDK (docs/protocol.md). Node-only extras (a file-backed store) are in
 * "fa-device-sdk/node". */

export { DeviceClient, EnrolmentRequiredError, IssuerError, ProtocolVersionError, ServerError } from "./client.js";
export type { Callbacks, DeviceClientOptions, DeviceHooks, Enrolment, NetworkOptions, Outcome, OutcomeStatus, Logger } from "./client.js";
export { ManualClock, SYSTEM_CLOCK } from "./clock.js";
export type { Clock } from "./clock.js";
export { TOKEN_BYTES, TokenError, decodeToken, encodeToken, importIssuerKey, keyId, requestToken, trustedKeys, verifyToken } from "./identityToken.js";
export type { IdentityToken, IssuerKey, PendingToken, TrustedKeys } from "./identityToken.js";
export { DevicePolicy, PolicyError } from "./policy.js";
export type { DevicePolicyOptions, Refusal, Decision } from "./policy.js";
export { IndexedDBBackend, LocalStore, MemoryBackend, StoreError } from "./store.js";
export type { StoreBackend, Retention } from "./store.js";
export type { ContributionRecord } from "./ledger.js";
export type { Assignment } from "./envelope.js";
export { PROTOCOL_VERSION, REFUSAL_REASONS, parseAssignment } from "./envelope.js";
export type { RefusalReason } from "./envelope.js";
export { HeadError, LogCheckError, ProofError, checkTaskProof, entryLeafHash, keyTable as logKeyTable, verifyConsistency, verifyHead, verifyInclusion } from "./translog.js";
export type { HeadJson, TaskProofContext, TaskProofJson } from "./translog.js";
export * as translog from "./translog.js";
export { DIGEST_FIELDS, TaskDigestError, canonicalJson, digestView, taskDigest } from "./taskDigest.js";
export { CohortUnverifiedError, InconsistentSurvivorsError, SecAggError, SignatureError, TaskMismatchError } from "./secagg/errors.js";
export { Assumptions as FloorAssumptions, UnsafeParametersError, check as checkSafetyFloor, plan as planCohort, safetyFloor, thresholdFloor } from "./secagg/floor.js";
export type { Floor } from "./secagg/floor.js";
export { OsRandom, SeededRandom, KeyedRandom } from "./randomness.js";
export type { RandomSource, ByteSource } from "./randomness.js";
export { registerScoringFunction } from "./kinds/training/blackbox.js";
export { knownKinds, parseTask } from "./kinds/registry.js";
export type { KindName, TypedTask } from "./kinds/registry.js";
export type * from "./kinds/taskTypes.generated.js";
export { sampleNoise, sampleDiscreteGaussian, sampleSkellam } from "./dp/noise.js";
