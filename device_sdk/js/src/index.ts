export * from "./secagg/client.js";
