// The pieces every page uses, on the host UI's Chakra components (its theme and colour mode).
import { Alert, Badge, Box, Heading, Link, Table, Text } from "@chakra-ui/react";
import type { ReactNode } from "react";

import { type TaskRef, refHref, taskName } from "src/lib/links";

export function Pill({ text, color, title }: { text: string; color?: string | undefined; title?: string | undefined }) {
  return (
    <Badge title={title ?? text} data-badge={text} bg={color ?? "#868e96"} color="white" borderRadius="full" px="2" mr="1" fontSize="xs"
           textTransform="none" fontWeight="medium" whiteSpace="nowrap" variant="solid">
      {text}
    </Badge>
  );
}

export function Muted({ children, ...rest }: { children: ReactNode } & Record<string, unknown>) {
  return <Text as="span" color="fg.muted" fontSize="xs" {...rest}>{children}</Text>;
}

export function Note({ children, ...rest }: { children: ReactNode } & Record<string, unknown>) {
  return <Text color="fg.muted" fontSize="xs" my="1" {...rest}>{children}</Text>;
}

export function Page({ title, children, testid }: { title?: ReactNode; children: ReactNode; testid?: string }) {
  return (
    <Box px="4" py="3" fontSize="sm" lineHeight="1.45" maxW="1400px" data-testid={testid}>
      {title ? <Heading as="h1" size="lg" mb="1">{title}</Heading> : null}
      {children}
    </Box>
  );
}

export function Section({ title, children, ...rest }: { title: ReactNode; children?: ReactNode } & Record<string, unknown>) {
  return (
    <Box mt="4" {...rest}>
      <Heading as="h2" size="md" mb="1">{title}</Heading>
      {children}
    </Box>
  );
}

export function Card({ children, highlight, ...rest }: { children: ReactNode; highlight?: boolean } & Record<string, unknown>) {
  return (
    <Box borderWidth="1px" borderColor={highlight ? "#f59f00" : "border"} outline={highlight ? "2px solid #f59f00" : undefined} borderRadius="md"
         px="3" py="2.5" my="2.5" {...rest}>
      {children}
    </Box>
  );
}

/** an error banner; with a title, the error is its description (shown as plain text, its lines kept) */
export function ErrorBox({ error, title, testid }: { error: string | null | undefined; title?: string; testid?: string }) {
  if (!error) return null;
  return (
    <Alert.Root status="error" my="2" role="alert" data-testid={testid}>
      <Alert.Indicator />
      {title ? (
        <Alert.Content>
          <Alert.Title>{title}</Alert.Title>
          <Alert.Description whiteSpace="pre-wrap" wordBreak="break-word">{error}</Alert.Description>
        </Alert.Content>
      ) : <Alert.Title>{error}</Alert.Title>}
    </Alert.Root>
  );
}

export function Loading({ what = "loading…" }: { what?: string }) {
  return <Note>{what}</Note>;
}

export function A({ href, children, ...rest }: { href: string; children: ReactNode } & Record<string, unknown>) {
  return <Link href={href} color="fg.info" textDecoration="underline" {...rest}>{children}</Link>;
}

export function TaskLink({ r }: { r: TaskRef }) {
  const href = refHref(r);
  if (!href) return <Muted>{r.dag_id || "(another DAG)"}</Muted>;
  return <A href={href} title={r.run_id ?? ""}>{taskName(r)}</A>;
}

export interface Row {
  cells: ReactNode[];
  highlight?: boolean;
  key?: string | number;
}

export function DataTable({ head, rows, testid }: { head: ReactNode[]; rows: Row[]; testid: string }) {
  return (
    <Table.Root size="sm" data-testid={testid} my="1">
      <Table.Header>
        <Table.Row>{head.map((c, i) => <Table.ColumnHeader key={i} whiteSpace="nowrap">{c}</Table.ColumnHeader>)}</Table.Row>
      </Table.Header>
      <Table.Body>
        {rows.map((r, i) => (
          <Table.Row key={r.key ?? i} bg={r.highlight ? "rgba(245,159,0,0.15)" : undefined}>
            {r.cells.map((c, j) => <Table.Cell key={j} verticalAlign="top">{c}</Table.Cell>)}
          </Table.Row>
        ))}
      </Table.Body>
    </Table.Root>
  );
}

export type Shape = "dot" | "line" | "triangle";

export function Legend({ items, testid = "legend" }: { items: [string, string, Shape?][]; testid?: string }) {
  if (!items.length) return null;
  return (
    <Box data-testid={testid} color="fg.muted" fontSize="xs" display="flex" flexWrap="wrap" gap="2.5" mb="1" ml="14">
      {items.map(([label, color, shape = "dot"]) => (
        <span key={label} data-legend={label} data-shape={shape}>
          <span style={shape === "triangle"
            ? { display: "inline-block", width: 0, height: 0, borderLeft: "5px solid transparent", borderRight: "5px solid transparent",
                borderBottom: `9px solid ${color}`, marginRight: 4, verticalAlign: "middle" }
            : { display: "inline-block", width: shape === "line" ? 14 : 9, height: shape === "line" ? 3 : 9,
                borderRadius: shape === "line" ? 0 : "50%", background: color, marginRight: 4, verticalAlign: "middle" }} />
          {label}
        </span>
      ))}
    </Box>
  );
}

/** what a bounded answer left out */
export function CutNote({ cut }: { cut?: string[] | undefined }) {
  return cut && cut.length ? <Note color="orange.fg" data-testid="cut-note">Not everything is shown: {cut.join("; ")}</Note> : null;
}

export function Problems({ problems, title = "Records that could not be read" }: { problems: string[]; title?: string }) {
  if (!problems.length) return null;
  return (
    <Section title={title}>
      <ul>{problems.map((p, i) => <li key={i}>{p}</li>)}</ul>
    </Section>
  );
}
