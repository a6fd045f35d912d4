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
export class SignatureError extends ProtocolError {}
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
