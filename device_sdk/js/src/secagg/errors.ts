/** Typed errors of the secure-aggregation client (the names of secagg/errors.py). */

export class SecAggError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}
export class ConfigError extends SecAggError {}
export class ProtocolError extends SecAggError {}
export class MessageFormatError extends ProtocolError {}
export class WrongSessionError extends ProtocolError {}
export class WrongPhaseError extends ProtocolError {}
export class UnknownPartyError extends ProtocolError {}
/** A missing or invalid Ed25519 signature. */
export class SignatureError extends ProtocolError {}

/** A peer's signature over its keys, bound to the session and this party's task digest, does not verify, or its share
 * does not open under the channel key bound to them (`share`): the server showed that peer another task (or another
 * cohort size, model, privacy block, members list…), or altered its keys or its share. The message is
 * secagg/errors.py's, word for word. */
export class TaskMismatchError extends SignatureError {
  constructor(readonly party: number, detail = "", opts: { share?: boolean } = {}) {
    const what = opts.share
      ? "share does not open under the channel key bound to this session, task and members list"
      : "signature over its keys for this session and task does not verify";
    super(`party ${party}'s ${what}: it was shown another task or its keys were altered` + (detail ? ` (${detail})` : ""));
  }
}
export class DuplicateKeyError extends ProtocolError {}
export class DecryptionError extends ProtocolError {}
export class InconsistentSetsError extends ProtocolError {}
export class DoubleRevealError extends ProtocolError {}

/** The survivor set lists fewer parties than this client's own minimum. */
export class TooFewSurvivorsError extends InconsistentSetsError {
  constructor(readonly survivors: number, readonly minimum: number) {
    super(`survivors: ${survivors} parties, below this party's minimum of ${minimum}`);
  }
}

/** The unmask request's survivor set is not the one this party signed, or fewer than the threshold of its neighbours
 * signed it: the server may be showing parts of the neighbourhood different survivor sets. */
export class InconsistentSurvivorsError extends InconsistentSetsError {}

/** Fewer distinct members than this client's minimum signed their keys for this session and task
 * (`ClientSession` option `minVerified`): the cohort the server announced is not one the client can verify. */
export class CohortUnverifiedError extends InconsistentSetsError {
  constructor(readonly verified: number, readonly minimum: number, readonly tokens = false) {
    const what = tokens ? "signed their keys for this session and task and hold an identity token from a pinned issuer" : "signed their keys for this session and task";
    super(`cohort: ${verified} distinct members (this one included) ${what}, below this party's minimum of ${minimum}`);
  }
}
